"""The suite leaves the host as it found it (a pytest plugin, loaded by conftest).

Before the first test and after the last, the controlling pytest process (not an
xdist worker) takes a picture of what belongs to the host rather than to a test:

- Debian's package lists (``/var/lib/apt/lists``: names and sizes), so that
  ``apt-cache`` still knows the archive after a run;
- the firewall (``iptables-save`` and ``ip6tables-save``, counters left out);
- the kernel's settings (``sysctl -a``), less the counters that move by
  themselves (free inodes, the last pid, random numbers);
- the network namespaces (``/run/netns``) and the host namespace's links;
  a benchmark's namespace whose process died before the run (``bench.sandbox.leftovers``,
  say from a run that was killed) is left out: every benchmark removes those when it
  starts, and the summary names them;
- libvirt's domains, networks, storage pools and the default pool's volumes.

A difference fails the run: the summary names each one, and pytest's exit status
is 1 although every test passed.  ``RATELIMIT_HOST_CHECK=0`` turns the check off
(for a run that is meant to leave something, say a lab brought up by hand).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest

from bench import sandbox

ENV = "RATELIMIT_HOST_CHECK"
APT_LISTS = "/var/lib/apt/lists"
# counters the kernel moves by itself, and net.ipv4.tcp_fastopen_key: all zeros until the kernel
# makes a random key the first time a socket needs one (a fast-open listener in some program a
# test starts; nothing here sets it), seen as a change in a run on a fresh machine; anything else
# that moves between two readings a second apart at the start is left out too (see _sysctls)
VOLATILE = re.compile(r"^(fs\.(dentry-state|inode-nr|inode-state|file-nr|aio-nr|quota\..*)|kernel\.(ns_last_pid|random\..*|pty\.nr)"
                      r"|net\.netfilter\.nf_conntrack_count|net\.ipv4\.tcp_fastopen_key)$")
_KEY = pytest.StashKey[dict]()
_VOLATILE_KEY = pytest.StashKey[set]()
_DIFF_KEY = pytest.StashKey[list]()
_STALE_KEY = pytest.StashKey[list]()


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return f"({argv[0]} not installed)"
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return f"({argv[0]} timed out)"
    return r.stdout if r.returncode == 0 else f"({' '.join(argv)}: exit {r.returncode})"


def _apt_lists() -> list[str]:
    try:
        names = sorted(os.listdir(APT_LISTS))
    except OSError as e:
        return [f"({APT_LISTS}: {e.strerror})"]
    out = []
    for n in names:
        p = os.path.join(APT_LISTS, n)
        if os.path.isfile(p) and n != "lock":
            out.append(f"{n} {os.path.getsize(p)}")
    return out


def _firewall() -> list[str]:
    """Rules, own chains and policies other than ACCEPT, per table: an empty table that
    came into being during the run is the same firewall as no table."""
    lines = []
    for tool in ("iptables-save", "ip6tables-save"):
        table = ""
        for line in _run([tool]).splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith("#") or line == "COMMIT" or re.match(r"^:[A-Z]+ ACCEPT ", line):
                continue
            else:
                lines.append(f"{tool} {table}: " + re.sub(r"\s*\[\d+:\d+\]$", "", line))
    return lines


def _sysctls() -> dict[str, str]:
    out = {}
    for line in _run(["sysctl", "-a"]).splitlines():
        key, sep, value = line.partition(" = ")
        if sep and not VOLATILE.match(key):
            out[key] = value
    return out


def _libvirt() -> list[str]:
    if shutil.which("virsh") is None:
        return ["(virsh not installed)"]
    if not os.path.exists("/var/run/libvirt/libvirt-sock"):
        return ["(libvirtd not running)"]
    out = []
    for what, argv in (("domain", ["list", "--all", "--name"]), ("network", ["net-list", "--all", "--name"]),
                       ("pool", ["pool-list", "--all", "--name"]), ("volume", ["vol-list", "default"])):
        text = _run(["virsh", "-c", "qemu:///system", *argv])
        rows = text.splitlines()[2:] if what == "volume" and not text.startswith("(") else text.splitlines()
        out += [f"{what} {r.split()[0]}" for r in rows if r.strip() and not r.startswith("(")]
    return out


def picture(stale: frozenset[str] = frozenset()) -> dict[str, object]:
    """What the check compares, less the namespaces ``stale`` (also usable by hand:
    ``python -c 'import hostcheck; ...'``)."""
    return {
        "apt lists": _apt_lists(),
        "firewall": _firewall(),
        "sysctl": _sysctls(),
        "netns": sorted(set(os.listdir("/run/netns")) - stale) if os.path.isdir("/run/netns") else [],
        "host links": sorted(line.split(":")[1].strip().split("@")[0]
                             for line in _run(["ip", "-o", "link", "show"]).splitlines() if ":" in line),
        "libvirt": _libvirt(),
    }


def differences(before: dict, after: dict, volatile: set[str] = frozenset()) -> list[str]:
    """One line per difference between two pictures (pure)."""
    out = []
    for what in before:
        a, b = before[what], after[what]
        if isinstance(a, dict):
            for key in sorted(set(a) | set(b)):
                if key not in volatile and a.get(key) != b.get(key):
                    out.append(f"{what}: {key} was {a.get(key, '(absent)')!r}, now {b.get(key, '(absent)')!r}")
        else:
            gone, new = [x for x in a if x not in b], [x for x in b if x not in a]
            if gone:
                out.append(f"{what}: gone: {', '.join(gone[:8])}{' ...' if len(gone) > 8 else ''} ({len(gone)})")
            if new:
                out.append(f"{what}: new: {', '.join(new[:8])}{' ...' if len(new) > 8 else ''} ({len(new)})")
    return out


def _enabled(config) -> bool:
    return (os.environ.get(ENV, "1") != "0" and not hasattr(config, "workerinput")
            and os.environ.get("RATELIMIT_IN_VM") != "1" and os.geteuid() == 0)


def pytest_sessionstart(session):
    if not _enabled(session.config):
        return
    stale = sandbox.leftovers()
    session.config.stash[_STALE_KEY] = stale
    first = picture(frozenset(stale))
    time.sleep(1)
    second = picture(frozenset(stale))
    session.config.stash[_VOLATILE_KEY] = {k for k in first["sysctl"] if first["sysctl"][k] != second["sysctl"].get(k)}
    session.config.stash[_KEY] = second


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_KEY, None)
    if before is None:
        return
    stale = frozenset(session.config.stash[_STALE_KEY])
    diff = differences(before, picture(stale), session.config.stash[_VOLATILE_KEY])
    session.config.stash[_DIFF_KEY] = diff
    if diff and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    diff = config.stash.get(_DIFF_KEY, None)
    if diff is None:
        return
    stale = config.stash[_STALE_KEY]
    if stale:
        terminalreporter.write_line(f"ratelimit: host check: left out {len(stale)} namespace(s) of benchmark processes "
                                    f"that had died before the run (the benchmarks remove them): "
                                    f"{', '.join(stale[:8])}{' ...' if len(stale) > 8 else ''}")
    if diff:
        terminalreporter.write_sep("=", "the host changed during the run", red=True)
        for line in diff:
            terminalreporter.write_line(f"ratelimit: host check: {line}")
    else:
        terminalreporter.write_line("ratelimit: host check: apt lists, firewall, sysctls, namespaces, host links "
                                    "and libvirt objects are as they were before the run")
