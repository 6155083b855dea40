"""What ratelimit installed where: one JSON record per (namespace, interface).

The record (``IF.json``) holds the request -- the plan is recompiled from it for
statistics, ``--clean`` and rollback -- and the fingerprint of what the plan owns in
the kernel (``fingerprint``), checked before anything is deleted.  It is versioned
and written atomically (a temporary file, fsync, rename, fsync of the directory); a
file that does not read as a record is an error (``StateError``), never "nothing
installed".  A record may instead say the interface is half-configured (``problem``:
a rollback that failed), which ``--list`` and ``--stats`` then report.  A record may also
hold a *staged* request: a plan built beside the installed one that no packet reaches
until it is committed (``service.staging``); the fingerprint then covers both.

A *marker* (``IF.marker``) is written before the first kernel change of an apply or
clean and removed once the record says what the kernel holds: finding one means a run
was killed mid-change, and it says what to go back to.  A lock file (``IF.lock``)
serializes runs on one interface.  The directory is ``$RATELIMIT_STATE_DIR`` or
``/run/ratelimit``; ``-`` stands for the host namespace.
"""

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, astuple, dataclass, fields, replace
from ipaddress import ip_address, ip_network
from pathlib import Path

from ..errors import ConflictError, StateError
from ..plan.layout import Place
from ..plan.validate import checked_layout
from ..spec import aqm, linklayer, lossmodel, macslot
from ..spec.model import MAIN_COHORT, Burst, Cell, Cohort, LinkParams, Request
from ..traces import tracespec

VERSION = 2  # 1: the bare request (ratelimit 0.4 before the record had a version)
LOCK_POLL_S = 0.05


def state_dir() -> Path:
    return Path(os.environ.get("RATELIMIT_STATE_DIR", "/run/ratelimit"))


def interface_path(netns: str | None, interface: str, suffix: str) -> Path:
    """The interface's file of the state directory ending ``suffix``, the record's and the
    trace driver's alike: ``interface_path(None, "eth1", "json")`` is
    ``/run/ratelimit/-/eth1.json``."""
    return state_dir() / (netns or "-") / f"{interface}.{suffix}"


def to_json(req: Request) -> dict:
    data = {f.name: getattr(req, f.name) for f in fields(Request) if f.name != "cohorts"}
    data["cohorts"] = [_cohort_json(c) for c in req.cohorts]
    data["places"] = None if req.places is None else [list(astuple(p)) for p in req.places]
    return data


def _cohort_json(c: Cohort) -> dict:
    data = asdict(c)
    data["hosts"] = [str(h) for h in c.hosts]
    data["ports"] = None if c.ports is None else [list(p) for p in c.ports]
    data["link"] = c.link.describe()
    data["servers"] = None if c.servers is None else [str(s) for s in c.servers]
    data["server_ports"] = None if c.server_ports is None else [list(p) for p in c.server_ports]
    return data


def _params(data: dict) -> LinkParams:
    return replace(LinkParams.from_dict(data), loss_model=lossmodel.from_record(data.get("loss_model")),
                   slot=macslot.from_record(data.get("slot")), aqm=aqm.from_record(data.get("aqm")))


def _cohort(data: dict, name: str = MAIN_COHORT) -> Cohort:
    return Cohort(
        name=data.get("name", name),
        hosts=tuple(ip_address(h) for h in data["hosts"]),
        ports=None if data["ports"] is None else tuple(tuple(p) for p in data["ports"]),
        down=_params(data["down"]), up=_params(data["up"]),
        per=data.get("per", "port"),
        link=linklayer.LinkLayer.from_description(data["link"]) if data.get("link") else linklayer.ETHERNET,
        profile=data.get("profile"),
        burst=Burst(**data["burst"]) if data.get("burst") else None,
        mpu_bytes=data.get("mpu_bytes", 64),
        servers=None if data.get("servers") is None else tuple(ip_network(s) for s in data["servers"]),
        others=bool(data.get("others", False)),
        server_ports=None if data.get("server_ports") is None else tuple(tuple(p) for p in data["server_ports"]),
        named=tuple((str(n), tuple(str(a) for a in addrs)) for n, addrs in data.get("named") or ()),
        trace=tracespec.from_json(data.get("trace")),
        cell=Cell(**{**data["cell"], "trace": tracespec.from_json(data["cell"].get("trace"))}) if data.get("cell")
        else None, blackhole=bool(data.get("blackhole", False)), reject=bool(data.get("reject", False)))


def from_json(data: dict) -> Request:
    """The request of a record; one written before cohorts (its link options beside the
    device's) reads as one cohort, the command line's."""
    names = {f.name for f in fields(Request)} - {"cohorts"}
    values = {k: v for k, v in data.items() if k in names}
    cohorts = data["cohorts"] if "cohorts" in data else [data]
    if not isinstance(cohorts, list):
        raise TypeError("cohorts is not a list")
    if "numbering" not in values:  # written before the numbering had a version: the bucket (1), or slot order (0)
        values["numbering"] = 1 if data.get("group_bucket") else 0
    values.setdefault("group_links", 256)  # written when every group held 256 links
    if values.get("places") is not None:
        values["places"] = tuple(Place(*p) for p in values["places"])
    if values.get("container") is not None:
        values["container"] = tuple(str(v) for v in values["container"])
    return Request(cohorts=tuple(_cohort(c) for c in cohorts), **values)


def request_from_json(data, where: str) -> Request:
    """``from_json`` for data read from a file: anything malformed is a StateError naming ``where``."""
    try:
        req = from_json(data)
        checked_layout(req)  # every check a request passes
        return req
    except Exception as err:  # a hand-edited or damaged file: say which, in one line
        raise StateError(f"{where}: does not hold a ratelimit request ({_reason(err)})") from None


def _reason(err: Exception) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}" if not isinstance(err, StateError) else text


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader (or a reboot) sees the old or the new
    file whole: a temporary file beside it, fsync, rename, fsync of the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path, what: str):
    """The JSON in ``path`` (None if there is no file), or StateError naming it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StateError(f"{what} {path}: cannot be read ({err.strerror})") from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise StateError(f"{what} {path}: is not valid JSON ({err}); it is damaged") from None


@dataclass(frozen=True)
class Record:
    """What the state file says about one interface."""

    request: Request | None  # what is (or was meant to be) applied
    fingerprint: dict | None  # what the plan owns in the kernel (None: a version-1 file)
    problem: str | None = None  # set: the interface is half-configured, and how to recover
    version: int = VERSION
    staged: Request | None = None  # built beside ``request``, waiting for a commit


def recovery_command(netns: str | None, interface: str) -> str:
    """The command that clears whatever is on the interface, for messages."""
    ns = f" --netns {netns}" if netns else ""
    return f"ratelimit --clean --force --interface {interface}{ns}"


def load(netns: str | None, interface: str) -> Record | None:
    """The interface's record; None when there is none; StateError when the file is there
    but unreadable, damaged or of a version this ratelimit does not know."""
    path = record_path(netns, interface)
    try:
        return _record(path, read_json(path, "state file"))
    except StateError as err:
        raise StateError(f"{err}; check the interface (tc qdisc show dev {interface}), then: "
                         f"{recovery_command(netns, interface)}") from None


def _record(path: Path, data) -> Record | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise StateError(f"state file {path}: is not a ratelimit record")
    version = data.get("version", 1)
    if version == 1:  # the request alone, as ratelimit wrote it before records had versions
        return Record(request_from_json(data, f"state file {path}"), None, version=1)
    if version != VERSION:
        raise StateError(f"state file {path}: version {version!r} is not one this ratelimit reads (1, {VERSION})")
    req, staged = (None if data.get(key) is None else request_from_json(data[key], f"state file {path}")
                   for key in ("request", "staged"))
    fp, problem = data.get("fingerprint"), data.get("problem")
    if (fp is not None and not isinstance(fp, dict)) or (problem is not None and not isinstance(problem, str)) \
            or (req is None and problem is None and staged is None):
        raise StateError(f"state file {path}: is damaged (no request, or a malformed fingerprint or problem)")
    return Record(req, fp, problem, staged=staged)


def save(req: Request | None, fingerprint: dict, staged: Request | None = None) -> None:
    """Record that ``req`` is applied (None: nothing of ratelimit's carries traffic), that
    ``staged`` is built beside it, and that together they own ``fingerprint`` in the kernel."""
    where = req or staged
    data = {"version": VERSION, "request": None if req is None else to_json(req), "fingerprint": fingerprint}
    if staged is not None:
        data["staged"] = to_json(staged)
    write_atomic(interface_path(where.netns, where.interface, "json"), json.dumps(data))


def save_problem(netns: str | None, interface: str, req: Request | None, problem: str) -> None:
    """Record that the interface is half-configured: ``problem`` says how, and how to recover."""
    write_atomic(interface_path(netns, interface, "json"),
                 json.dumps({"version": VERSION, "request": None if req is None else to_json(req),
                             "fingerprint": None, "problem": problem}))


def targets() -> list[tuple[str | None, str]]:
    """Every (netns, interface) with a record, sorted."""
    base = state_dir()
    if not base.is_dir():
        return []
    out = []
    for d in sorted(base.iterdir()):
        if d.is_dir() and d.name != "lab":
            out += [(None if d.name == "-" else d.name, p.stem) for p in sorted(d.glob("*.json"))]
    return out


# ------------------------------------------------------------------ markers


def record_path(netns: str | None, interface: str) -> Path:
    return interface_path(netns, interface, "json")


def marker_path(netns: str | None, interface: str) -> Path:
    return interface_path(netns, interface, "marker")


ACTIONS = ("apply", "clean", "stage", "abort")  # what a marker says was under way


def read_marker(netns: str | None, interface: str) -> dict | None:
    """The marker a run left before its first kernel change, or None; StateError if damaged."""
    path = marker_path(netns, interface)
    data = read_json(path, "marker")
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or data.get("action") not in ACTIONS:
        raise StateError(f"marker {path}: is damaged or of another version; check the interface (tc qdisc show "
                         f"dev {interface}), then remove the file and run: {recovery_command(netns, interface)}")
    return data


def write_marker(netns: str | None, interface: str, action: str, *, old: Request | None,
                 new: Request | None, foreign: dict | None = None, forced: bool = False) -> None:
    """Say, before the first kernel change, what a killed run should go back to: ``old`` (the
    plan before, if ratelimit's), ``foreign`` (what ``--force`` replaces, as captured) and,
    for a clean, whether it was forced."""
    write_atomic(marker_path(netns, interface), json.dumps({
        "version": VERSION, "action": action, "pid": os.getpid(), "started": time.time(),
        "old": None if old is None else to_json(old), "new": None if new is None else to_json(new),
        "foreign": foreign, "forced": forced}))


def clear_marker(netns: str | None, interface: str) -> None:
    marker_path(netns, interface).unlink(missing_ok=True)


def forget(netns: str | None, interface: str) -> None:
    interface_path(netns, interface, "json").unlink(missing_ok=True)


def interfaces(netns: str | None) -> list[str]:
    d = state_dir() / (netns or "-")
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


@contextmanager
def lock(netns: str | None, interface: str, on_wait=None, timeout: float | None = None):
    """Hold the interface's lock; ``on_wait()`` is called if we have to wait.  With a
    ``timeout`` (seconds), waiting longer raises ConflictError instead of blocking on."""
    path = interface_path(netns, interface, "lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait()
            _wait(fh, netns, interface, timeout)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wait(fh, netns, interface, timeout) -> None:
    if timeout is None:
        fcntl.flock(fh, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(LOCK_POLL_S)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                where = f"{netns}/{interface}" if netns else interface
                waited = f" (waited {timeout:g} s)" if timeout else ""
                raise ConflictError(f"--interface: {where} is busy: another ratelimit run is changing it"
                                    f"{waited}; try again when it is done") from None
