"""The state file, its marker, the fingerprint and the lock, without root."""

import json
import os
import threading
import time

import pytest

from ratelimit.errors import ConflictError, StateError
from ratelimit.plan.compile import compile_plan
from ratelimit.service import make_request
from ratelimit.state import fingerprint, records


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def request(**kw):
    args = dict(hosts="198.18.1.2", ports="5000-5003", mode="shape", rate="1mbit")
    args.update(kw)
    return make_request("rlh0", netns="rlhd-x", **args)


def test_a_record_reads_back_as_written(state_dir):
    req = request()
    owned = fingerprint.of_plan(compile_plan(req))
    records.save(req, owned)
    record = records.load("rlhd-x", "rlh0")
    assert record.request == req and record.fingerprint == owned and record.problem is None
    data = json.loads((state_dir / "rlhd-x" / "rlh0.json").read_text())
    assert data["version"] == records.VERSION
    assert sorted(os.listdir(state_dir / "rlhd-x")) == ["rlh0.json"]  # no temporary file left
    assert records.targets() == [("rlhd-x", "rlh0")]


def test_no_record_is_none():
    assert records.load("rlhd-x", "rlh0") is None


@pytest.mark.parametrize("text,fragment", [
    ("{\"version\": 2, \"requ", "is not valid JSON"),
    ("", "is not valid JSON"),
    ("[1, 2]", "is not a ratelimit record"),
    ("{\"version\": 3, \"request\": null}", "version 3 is not one this ratelimit reads (1, 2)"),
    ("{\"version\": \"two\"}", "version 'two' is not one this ratelimit reads"),
    ("{\"version\": 2, \"request\": {\"interface\": \"rlh0\"}}", "does not hold a ratelimit request"),
    ("{\"version\": 2, \"request\": null}", "is damaged"),
    ("{\"hosts\": [\"not-an-address\"], \"ports\": [[1, 2]]}", "does not hold a ratelimit request"),
])
def test_a_damaged_record_is_an_error_never_nothing_installed(state_dir, text, fragment):
    path = state_dir / "rlhd-x" / "rlh0.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(StateError) as info:
        records.load("rlhd-x", "rlh0")
    message = str(info.value)
    assert message.startswith(f"state file {path}: ") and fragment in message, message
    assert "\n" not in message and message.endswith("ratelimit --clean --force --interface rlh0 --netns rlhd-x")
    assert info.value.exit_code == 8


def test_a_version_1_record_is_the_bare_request(state_dir):
    req = request()
    path = state_dir / "rlhd-x" / "rlh0.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(records.to_json(req)))  # as ratelimit wrote it before records had versions
    record = records.load("rlhd-x", "rlh0")
    assert record.version == 1 and record.request == req and record.fingerprint is None


def test_a_problem_is_recorded_and_read_back():
    records.save_problem("rlhd-x", "rlh0", None, "rlh0 is half-configured: ...")
    record = records.load("rlhd-x", "rlh0")
    assert record.problem == "rlh0 is half-configured: ..." and record.request is None


def test_write_atomic_leaves_the_old_file_when_writing_fails(state_dir, monkeypatch):
    path = state_dir / "f.json"
    records.write_atomic(path, "old")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        records.write_atomic(path, "new")
    assert path.read_text() == "old" and os.listdir(state_dir) == ["f.json"]


def test_markers(state_dir):
    assert records.read_marker("rlhd-x", "rlh0") is None
    records.write_marker("rlhd-x", "rlh0", "apply", old=None, new=request())
    marker = records.read_marker("rlhd-x", "rlh0")
    assert marker["action"] == "apply" and marker["pid"] == os.getpid() and marker["old"] is None
    assert records.request_from_json(marker["new"], "marker") == request()
    records.marker_path("rlhd-x", "rlh0").write_text("{\"version\": 2, \"action\": \"dance\"}")
    with pytest.raises(StateError, match="is damaged or of another version"):
        records.read_marker("rlhd-x", "rlh0")
    records.clear_marker("rlhd-x", "rlh0")
    assert records.read_marker("rlhd-x", "rlh0") is None


# ---------------------------------------------------------------- fingerprint

def picture_of(plan, **changes):
    """The picture a kernel holding exactly ``plan`` gives (as Reader.picture reads it)."""
    from ratelimit.plan.ops import HtbQdisc, IngressQdisc
    from ratelimit.plan.shaping import HtbClass
    out = {dev: {"root": None, "ingress": None, "classes": []} for dev in plan.devices()}
    for op in plan.ops:
        if type(op) is HtbQdisc and op.parent == 0xFFFFFFFF:  # a group's qdisc is no root
            out[op.dev]["root"] = ("htb", op.handle)
        elif type(op) is IngressQdisc:
            out[op.dev]["ingress"] = "ingress"
        elif type(op) is HtbClass:  # the kernel dumps a qdisc's top classes with parent "root"
            parent = 0xFFFFFFFF if op.parent & 0xFFFF == 0 else op.parent
            out[op.dev]["classes"].append((op.classid, parent, "htb"))
    for dev, change in changes.items():
        out[dev] = None if change is None else dict(out[dev], **change)
    return out


def test_the_fingerprint_of_a_plan_matches_the_kernel_holding_it():
    plan = compile_plan(request(direction="both"))
    owned = fingerprint.of_plan(plan)
    assert set(owned) == {"rlh0", "rl-rlh0"}
    assert owned["rlh0"]["root"] == "htb 52:" and owned["rlh0"]["ingress"] == "ingress"
    # the pool, a group (its class and its qdisc's root class) and 4 links
    assert owned["rl-rlh0"]["device"] is True and owned["rlh0"]["classes"][0] == 7
    picture = picture_of(plan)
    assert fingerprint.differences(owned, picture) == []
    assert fingerprint.of_kernel(owned, picture) == owned
    assert not fingerprint.absent(owned, picture)


@pytest.mark.parametrize("changes,phrase", [
    ({"rlh0": {"root": ("tbf", 0x520000)}}, "rlh0 root qdisc is tbf 52: where ratelimit recorded htb 52:"),
    ({"rlh0": {"classes": [(0x520001, 0xFFFFFFFF, "htb")]}}, "rlh0 has 1 HTB classes where ratelimit recorded 7"),
    ({"rlh0": {"classes": [(0x520001 + i, 0xFFFFFFFF, "htb") for i in range(7)]}},
     "rlh0 has different HTB classes where ratelimit recorded 7"),
    ({"rlh0": {"ingress": None}}, "rlh0 ingress qdisc is none where ratelimit recorded ingress"),
    ({"rl-rlh0": None}, "device rl-rlh0 is gone"),
])
def test_a_tree_not_as_recorded_differs(changes, phrase):
    plan = compile_plan(request(direction="both"))
    picture = picture_of(plan, **changes)
    assert phrase in fingerprint.differences(fingerprint.of_plan(plan), picture)
    assert not fingerprint.absent(fingerprint.of_plan(plan), picture)


def test_a_tree_that_is_all_gone_is_absent():
    plan = compile_plan(request(direction="both"))
    gone = picture_of(plan, **{"rlh0": {"root": None, "ingress": None, "classes": []}, "rl-rlh0": None})
    assert fingerprint.absent(fingerprint.of_plan(plan), gone)


def test_classes_not_read_are_not_compared():
    plan = compile_plan(request())
    assert fingerprint.differences(fingerprint.of_plan(plan), picture_of(plan, rlh0={"classes": None})) == []


# ---------------------------------------------------------------- the lock

def test_the_lock_times_out_with_one_line():
    waited = []
    with records.lock("rlhd-x", "rlh0"):
        started = time.monotonic()
        with pytest.raises(ConflictError) as info:
            with records.lock("rlhd-x", "rlh0", on_wait=lambda: waited.append(1), timeout=0.2):
                pytest.fail("got a lock another holder has")
        assert 0.2 <= time.monotonic() - started < 2 and waited == [1]
    assert str(info.value) == ("--interface: rlhd-x/rlh0 is busy: another ratelimit run is changing it "
                               "(waited 0.2 s); try again when it is done")
    with records.lock("rlhd-x", "rlh0", timeout=0):  # free again
        pass


def test_the_lock_is_had_once_the_holder_lets_go():
    holding = threading.Event()

    def hold():
        with records.lock("rlhd-x", "rlh0"):
            holding.set()
            time.sleep(0.3)  # the holder's hold (the scenario, not a reading): the waiter's lock has to wait for it
    t = threading.Thread(target=hold)
    t.start()
    holding.wait()
    with records.lock("rlhd-x", "rlh0", timeout=5):
        pass
    t.join()
