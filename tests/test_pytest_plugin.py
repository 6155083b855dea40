"""The pytest fixtures, used the way a project's own suite uses them: in a
separate pytest run, on the documented example and on small test files."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ratelimit.lab import topology

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "test_slow_clients.py"



def run_pytest(tmp_path, *args, cwd=None):
    """pytest in a process of its own, our plugin loaded by its module's name and its entry
    point's name ("ratelimit") blocked.  Asking first whether an installed ratelimit's entry
    point loads it raced with ``test_install``, which rewrites the source tree's egg-info as
    it builds a wheel: the plugin was then loaded twice, and pytest refuses one module under
    two names."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},  # the outer run's options stay there
           "RATELIMIT_STATE_DIR": str(tmp_path / "state"), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:ratelimit", "-p", "ratelimit.lab.pytest_plugin",
                           "-p", "no:cacheprovider",
                           "-q", "-rA", f"--basetemp={tmp_path / 'base'}", *args],
                          cwd=cwd or tmp_path, env=env, capture_output=True, text=True, timeout=300)


def fixture_labs():
    """Namespaces the fixtures' labs (named pt<pid>_<n>) have on this machine."""
    return [n for n in topology.list_leftovers(topology.PREFIX + "pt")]


def test_docs_show_the_tested_example():
    """docs/fixtures.md quotes examples/test_slow_clients.py from its imports to its end."""
    docs = (ROOT / "docs" / "fixtures.md").read_text()
    code = EXAMPLE.read_text()
    body = code[code.index("import sys"):]
    block = docs.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == body


@pytest.mark.netns
@pytest.mark.alone_on_host  # the example times a download against the link model, within 5%
def test_the_documented_example_passes(tmp_path):
    before = fixture_labs()
    r = run_pytest(tmp_path, str(EXAMPLE), cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
    assert fixture_labs() == before
    assert not list((tmp_path / "state").glob("lab/pt*"))


@pytest.mark.netns
@pytest.mark.alone_on_host  # the example times a download against the link model, within 5%
def test_labs_are_removed_after_failures_and_errors(tmp_path):
    names = tmp_path / "names"
    (tmp_path / "test_user.py").write_text(textwrap.dedent(f"""
        import pytest, sys

        def _note(link):
            with open({str(names)!r}, "a") as f:
                f.write(link.name + "\\n")

        def test_fails_with_a_server_running(make_emulated_link):
            link = make_emulated_link(clients=2)
            _note(link)
            link.run_server([sys.executable, "-m", "http.server", "8080"], port=8080)
            other = make_emulated_link(rate="1mbit", mode="shape")
            _note(other)
            assert False, "the user's test fails"

        @pytest.mark.emulated_link(profile="modem-99k")
        def test_unknown_profile(emulated_link):
            pass

        @pytest.mark.emulated_link(clients=1, server="builtin", rate="400kbit")
        def test_measures(emulated_link):
            _note(emulated_link)
            d = emulated_link.measure_download("/100000.bin")
            assert d.bytes == 100_000 and 10000 <= d.local_port <= 10999
            wire = sum(r["bytes"] for r in emulated_link.stats()["links"] if r["direction"] == "dest")
            assert wire > 100_000
            # within 5% of the link's model for exactly this download (headers, framing, handshake)
            assert 0.95 < d.seconds / d.model_seconds(emulated_link.model) < 1.05, d
            assert emulated_link.measure_rtt() < 0.05
            assert emulated_link.applied["mode"] == "shape"
    """))
    r = run_pytest(tmp_path, "test_user.py")
    out = r.stdout
    assert "FAILED test_user.py::test_fails_with_a_server_running" in out, out + r.stderr
    assert "the user's test fails" in out
    assert "--profile: 'modem-99k' is not a profile" in out
    assert "PASSED test_user.py::test_measures" in out, out
    made = names.read_text().split()
    assert len(made) == 3
    for name in made:
        assert topology.lab_namespaces(name) == []
    assert not list((tmp_path / "state").glob("lab/pt*"))
    # the http.server the failing test started is gone with its namespace
    ps = subprocess.run(["pgrep", "-f", "http.server 8080"], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


@pytest.mark.netns
def test_marker_sets_the_servers_tcp_start(tmp_path):
    """server_tcp in the marker: the server namespace's routes and congestion control; a bad
    value fails the test in one line naming the allowed ones."""
    (tmp_path / "test_tcp.py").write_text(textwrap.dedent("""
        import json, pytest

        @pytest.mark.emulated_link(server_tcp="2000")
        def test_start_of_2000(emulated_link):
            assert emulated_link.server_tcp == {"name": "2000", "rto_min_ms": 1000, "initcwnd_segments": 2,
                                                "congestion_control": "reno"}
            r = emulated_link.server.run(["ip", "-j", "route", "show", "default"], check=True)
            assert json.loads(r.stdout)[0]["metrics"] == [{"initcwnd": 2, "rto_min": 1000}]

        @pytest.mark.emulated_link(server_tcp="fast")
        def test_unknown_start(emulated_link):
            pass
    """))
    before = fixture_labs()
    r = run_pytest(tmp_path, "test_tcp.py")
    out = r.stdout
    assert "PASSED test_tcp.py::test_start_of_2000" in out, out + r.stderr
    assert "--server-tcp: 'fast' is not one of linux, rfc6298, 2000" in out, out
    assert fixture_labs() == before


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.alone_on_host  # downloads timed from userspace against each client's cohort model, within 5%
def test_a_mix_gives_each_client_its_cohort_and_model(tmp_path):
    """``mix=`` in the marker splits the clients between profiles; ``profiles=[...]`` gives
    each client its own; ``link.cohort(i)`` and ``link.model_of(i)`` tell a test which link
    a client is on, and a download from each client takes what its own model says."""
    (tmp_path / "test_mix.py").write_text(textwrap.dedent("""
        import concurrent.futures, pytest

        @pytest.mark.emulated_link(mix="modem-28k8:50%,3g:50%", clients=2, no_delay="auto", server="nginx",
                                   server_tcp="rfc6298")
        def test_mix(emulated_link):
            link = emulated_link
            assert link.cohorts == {"client1": {"cohort": "modem-28k8", "profile": "modem-28k8"},
                                    "client2": {"cohort": "3g", "profile": "3g"}}
            assert link.model_of(2).down_bps == 1_600_000 and link.model_of(1).down_bps == 28_800
            with pytest.raises(RuntimeError, match="2 cohorts are applied"):
                link.model
            files = {1: "/10000.bin", 2: "/1000000.bin"}  # each about 3 s (modem) and 5 s (3g)
            link.measure_download("/1000.bin", client=1)  # once before (tests/test_cohorts_netns.py)
            link.wait_idle()  # what TCP sent again would hold up the next handshake on the modem
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                done = dict(zip(files, pool.map(lambda i: link.measure_download(files[i], client=i), files)))
            for i, d in done.items():
                model_s = d.model_seconds(link.model_of(i))
                print(f"client{i} ({link.cohort(i)['profile']}): {d.bytes:,} bytes in {d.seconds:.2f} s, "
                      f"its model {model_s:.2f} s")
                assert model_s > 2 and 0.95 < d.seconds / model_s < 1.05, d
            assert link.expected_seconds(10_000, client=1) > 2.9

        @pytest.mark.emulated_link(profiles=["modem-28k8", "isdn-64k", "modem-28k8"], no_delay="auto")
        def test_profiles(emulated_link):
            link = emulated_link
            assert [link.cohort(i)["profile"] for i in (1, 2, 3)] == ["modem-28k8", "isdn-64k", "modem-28k8"]
            assert link.model_of(2).down_bps == 64_000
            rows = link.stats()["links"]
            assert {r["profile"] for r in rows if r["host"] == link.client(3).address} == {"modem-28k8"}

        @pytest.mark.emulated_link(profiles=["modem-28k8"], clients=2)
        def test_profiles_and_clients_disagree(emulated_link):
            pass
    """))
    before = fixture_labs()
    r = run_pytest(tmp_path, "test_mix.py", "-s")
    out = r.stdout
    assert "PASSED test_mix.py::test_mix" in out and "PASSED test_mix.py::test_profiles" in out, out + r.stderr
    assert "clients=2 but profiles= names 1 (one per client)" in out, out
    assert fixture_labs() == before


@pytest.mark.netns
@pytest.mark.alone_on_host  # a download timed from userspace against the schedule's capacity, within 15%
def test_a_traced_link_in_the_fixture_times_a_download_against_its_schedule(tmp_path):
    """``schedule=`` in the marker: the router's driver runs while the lab is up, and a
    download takes what the schedule's capacity from its start says (``link.trace_seconds``)."""
    (tmp_path / "slow-then-fast.toml").write_text(textwrap.dedent("""
        description = "3 s at 200 kbit/s, then 2 Mbit/s for good"
        loop = false
        [[step]]
        duration = "3s"
        down = { rate = "200kbit" }
        up = { rate = "200kbit" }
        [[step]]
        duration = "1s"
        down = { rate = "2mbit" }
        up = { rate = "2mbit" }
    """))
    (tmp_path / "test_traced.py").write_text(textwrap.dedent(f"""
        import time, pytest

        @pytest.mark.emulated_link(schedule={str(tmp_path / "slow-then-fast.toml")!r}, phase="same",
                                   server="builtin")
        def test_traced(emulated_link):
            link = emulated_link
            driver = link.stats()["driver"]
            assert driver["running"], driver
            at = time.time()
            d = link.measure_download("/1000000.bin")
            expected = link.trace_seconds(d.bytes, at)
            print(f"{{d.bytes:,}} bytes in {{d.seconds:.2f}} s, the schedule's capacity {{expected:.2f}} s")
            # at the plan's mean (650 kbit/s) it would take 12 s; at 2 Mbit/s from the start, 4.2 s
            assert 0.85 < d.seconds / expected < 1.15, (d, expected)
    """))
    before = fixture_labs()
    r = run_pytest(tmp_path, "test_traced.py", "-s")
    assert "PASSED test_traced.py::test_traced" in r.stdout, r.stdout + r.stderr
    assert fixture_labs() == before


@pytest.mark.netns
@pytest.mark.alone_on_host  # the user's test times a download against the link model, within 5%
def test_a_scenario_with_a_cell_in_the_marker(tmp_path):
    """The marker's ``scenario=`` takes a scenario with a cell (docs/cells.md): the applied
    summary names it, and a client alone in it downloads at its own link's model."""
    (tmp_path / "tower.toml").write_text(textwrap.dedent("""
        [cell.tower]
        description = "a cell of 2 Mbit/s down for the two clients"
        down = "2mbit"
        [cohort.phones]
        description = "two clients, each its own link of 1 Mbit/s"
        hosts = "198.18.0.2-198.18.0.3"
        rate = "1mbit"
        cell = "tower"
    """))
    (tmp_path / "test_user.py").write_text(textwrap.dedent(f"""
        import pytest

        @pytest.mark.emulated_link(scenario={str(tmp_path / "tower.toml")!r}, clients=2, server="builtin")
        def test_a_cell(emulated_link):
            (cohort,) = emulated_link.applied["cohorts"]
            assert cohort["cell"] == {{"name": "tower", "down_bps": 2_000_000, "up_bps": None}}
            d = emulated_link.measure_download("/100000.bin")
            assert 0.95 < d.seconds / d.model_seconds(emulated_link.model_of(1)) < 1.05, d
    """))
    r = run_pytest(tmp_path, "test_user.py")
    assert "1 passed" in r.stdout, r.stdout + r.stderr

