"""``ratelimit save`` / ``ratelimit restore``: the applied links in a file that outlives /run.

In the spirit of iptables-save and iptables-restore: ``save`` writes the request of every
interface ratelimit manages, in every namespace, as applied -- resolved (addresses, not
host names; the profile's numbers with its name), checked against the kernel -- to one
JSON file; ``restore`` applies each again, so a router comes back with its links after a
reboot (``contrib/ratelimit-restore.service`` runs it at boot).  The file is
``$RATELIMIT_CONFIG_DIR/links.json``, by default ``/etc/ratelimit/links.json``.
"""

import json
import os
import time
from pathlib import Path

from ..containers import lookup
from ..containers.life import inside, now, recorded_single_segments
from ..errors import NotFoundError, RatelimitError, UsageError
from ..service import actions, expiry, readout
from ..spec.names import target_name
from ..spec.summary import describe, summary
from ..state import records

VERSION = 1
FILE_NAME = "links.json"


def config_dir() -> Path:
    return Path(os.environ.get("RATELIMIT_CONFIG_DIR", "/etc/ratelimit"))


def default_file() -> Path:
    return config_dir() / FILE_NAME


def _stderr(text: str) -> None:
    import sys
    print(text, file=sys.stderr)


def save(path: Path | None = None, *, say=print, warn=_stderr) -> tuple[Path, int]:
    """Write every applied request to ``path``; returns it and how many were saved.  An
    interface whose record cannot be trusted is left out (``warn`` says why)."""
    path = Path(path) if path else default_file()
    links = []
    for netns, interface in records.targets():
        name = target_name(netns, interface)
        try:
            req = _applied(netns, interface, notice=lambda m: warn(f"ratelimit: {m}"))
        except RatelimitError as err:
            warn(f"ratelimit: {name}: not saved ({err})")
            continue
        if req is None:
            continue
        links.append(records.to_json(req))
        say(f"{name}: {describe(summary(req))}")
    records.write_atomic(path, json.dumps({"version": VERSION, "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                         "links": links}, indent=1) + "\n")
    return path, len(links)


def _applied(netns: str | None, interface: str, notice):
    """What is applied on ``interface``; a container's namespace (``rl-ct-ID``, named only
    while ratelimit runs: where 0.4 and earlier put a server's links) is named again for
    the reading, if its container runs."""
    if not (netns or "").startswith(lookup.NETNS_PREFIX):
        return readout.applied(interface, netns, notice=notice, repair=True)
    record = records.load(netns, interface)
    if record is None or record.request is None or record.request.container is None:
        return None
    with inside(record.request, notice) as ns:
        return None if ns is None else readout.applied(interface, ns, notice=notice, repair=True)


def load(path: Path | None = None) -> list:
    """The requests saved in ``path``; a missing or malformed file is a one-line error."""
    path = Path(path) if path else default_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise NotFoundError(f"restore: {path} does not exist (write it with: ratelimit save)") from None
    except OSError as err:
        raise NotFoundError(f"restore: {path} cannot be read ({err.strerror})") from None
    try:
        data = json.loads(text)
    except ValueError as err:
        raise UsageError(f"restore: {path} is not valid JSON ({err})") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("links"), list):
        raise UsageError(f"restore: {path} is not a file ratelimit save wrote (version {VERSION}, a list of links)")
    out = []
    for i, item in enumerate(data["links"], start=1):
        try:
            out.append(records.request_from_json(item, f"link {i}"))
        except RatelimitError as err:
            raise UsageError(f"restore: {path}: {err}") from None
    return out


def restore(path: Path | None = None, *, force: bool = False, say=print, warn=_stderr) -> int:
    """Apply every saved request again; returns 0, or the exit code of the first that failed
    (the others are applied all the same)."""
    code = 0
    for req in load(path):
        name = target_name(req.netns, req.interface)
        if expiry.ended(req, int(time.time() * 1000)):
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(req.expires_ms / 1000))
            say(f"{name}: not restored: its plan ended (--for) at {at}")
            continue
        try:
            done = _restore_one(req, force, notice=lambda m: warn(f"ratelimit: {m}"))
        except RatelimitError as err:
            warn(f"ratelimit: {name}: not restored ({err})")
            code = code or err.exit_code
            continue
        if done is not None:
            say(f"{target_name(done.netns, done.interface)}: {describe(summary(done))}")
    return code


def _restore_one(req, force: bool, notice):
    """Apply ``req``; one recorded for a container goes where that container is now
    (``life.now``), or nowhere (None) when it is not running."""
    if req.container is None:
        actions.apply(req, force=force, notice=notice)
        return req
    with now(req, notice) as again:
        if again is not None:
            actions.apply(again, force=force, notice=notice)
    if again is not None and again.server_side:
        recorded_single_segments(again)
    return again
