"""The kernel capability probe: its messages (pure) and real probing (netns)."""

from __future__ import annotations

import os

import pytest

from ratelimit.errors import KernelMissing, RatelimitError
from ratelimit.kernel import netns as lab_netns, probe


# -- pure -------------------------------------------------------------------

@pytest.mark.parametrize("feature,module", [
    ("netem", "sch_netem"), ("htb", "sch_htb"), ("ingress", "sch_ingress"), ("clsact", "sch_ingress"),
    ("u32", "cls_u32"), ("police", "act_police"), ("mirred", "act_mirred"), ("gact", "act_gact"),
    ("ifb", "ifb"), ("veth", "veth"), ("vlan", "8021q"),
])
def test_features_map_to_their_kernel_modules(feature, module):
    assert probe.module_for(feature) == module
    assert probe.MODULES[feature] == module


def test_every_feature_the_others_use_is_probed():
    assert {"htb", "netem", "ingress", "u32", "police", "mirred", "ifb"} <= set(probe.FEATURES)
    assert set(probe.FULL_KERNEL) <= set(probe.FEATURES)


def test_missing_message_names_the_module_and_the_ways_to_get_it():
    msg = probe.missing_message("netem")
    assert "\n" not in msg
    assert "sch_netem" in msg
    assert "modprobe sch_netem" in msg
    assert "linux-modules-extra-$(uname -r)" in msg
    assert "ratelimit vm -- COMMAND" in msg


def test_missing_message_for_a_built_in_feature_suggests_a_stock_kernel():
    msg = probe.missing_message("pfifo")
    assert "modprobe" not in msg and "ratelimit vm -- COMMAND" in msg


def test_an_unknown_feature_is_refused_with_the_known_ones():
    with pytest.raises(KernelMissing, match="unknown kernel feature 'nosuch'.*netem"):
        probe.probe(["nosuch"])
    assert issubclass(KernelMissing, RatelimitError)


# -- real probing -------------------------------------------------------------

@pytest.fixture
def unprobed(monkeypatch):
    """A process that has probed nothing yet (its cache is put back after the test)."""
    monkeypatch.setattr(probe, "_CACHE", {})


@pytest.mark.netns
def test_probe_answers_every_feature_and_leaves_no_namespace(unprobed):
    result = probe.probe()
    assert list(result) == list(probe.FEATURES)
    assert all(isinstance(v, bool) for v in result.values())
    # what every kernel with traffic control has (LAB.md: even the sandbox's)
    assert result["htb"] and result["u32"] and result["veth"] and result["ingress"]
    # its own (rlprobe-<pid>-...): a test in another xdist worker may be probing right now
    assert not [n for n in lab_netns.namespaces() if n.startswith(f"rlprobe-{os.getpid()}-")]


@pytest.mark.netns
def test_probe_results_are_cached_per_process():
    first = probe.probe(["htb", "netem"])
    before = dict(probe._CACHE)
    assert probe.probe(["netem", "htb"]) == {"netem": first["netem"], "htb": first["htb"]}
    assert probe._CACHE == before


@pytest.mark.netns
def test_require_passes_or_names_the_first_missing_module():
    probe.require(["htb", "u32"])
    lacking = probe.missing(probe.FULL_KERNEL)
    if lacking:  # the sandbox kernel: no netem, police, ...
        with pytest.raises(KernelMissing) as e:
            probe.require(probe.FULL_KERNEL)
        assert e.value.feature == lacking[0]
        assert probe.MODULES[lacking[0]] in str(e.value)
    else:  # a full kernel
        probe.require(probe.FULL_KERNEL)


@pytest.mark.kernel("netem", "police")
def test_a_full_kernel_has_what_the_vm_promises(unprobed):
    assert probe.missing(["netem", "police", "gact", "ifb", "htb", "u32", "mirred"]) == []
