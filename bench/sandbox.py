"""Throwaway namespaces for benchmarks, their clean-up, and the hand-off to the full-kernel VM.

Namespaces made here are called ``rlb-<pid>-<tag>`` (``rlb-`` is not the
``rl-`` of the namespace lab, so neither ever removes the other's); every one
is deleted when its ``with`` block ends, and any left at exit (an exception,
Ctrl-C, SIGTERM) are deleted by an ``atexit`` hook.  Benchmark traffic only
flows between namespaces made by the benchmark, on 198.18.0.0/15 addresses.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from ratelimit.kernel.netns import parent_only

from .common import DEV, PEER, REPO, BenchError, run, say
from .results import RESULTS_DIR

NS_PREFIX = "rlb-"
MODULES = ("sch_htb", "sch_netem", "sch_ingress", "cls_u32", "act_police", "act_mirred", "ifb")


_LIVE: set[str] = set()
_counter = 0


def _delete_ns(name: str) -> None:
    """Kill what runs in ``name`` and delete it (quietly; it may be gone)."""
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    _LIVE.discard(name)


_TOPOLOGIES: list = []


def track_topology(topo) -> None:
    """Remember an ``topology`` topology (or ``lab_core.Lab``) to remove at exit."""
    _TOPOLOGIES.append(topo)


def untrack_topology(topo) -> None:
    if topo in _TOPOLOGIES:
        _TOPOLOGIES.remove(topo)


def cleanup_all() -> None:
    """Delete every namespace and topology this process made that still exists."""
    for name in sorted(_LIVE):
        _delete_ns(name)
    while _TOPOLOGIES:
        topo = _TOPOLOGIES.pop()
        try:
            (getattr(topo, "down", None) or topo.destroy)()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def leftovers() -> list[str]:
    """Namespaces named like a benchmark's whose process is gone."""
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.startswith(NS_PREFIX):
            pid = n[len(NS_PREFIX):].split("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                out.append(n)
    return sorted(out)


def remove_leftovers() -> list[str]:
    """Delete namespaces left by benchmark processes that died (by name only)."""
    found = leftovers()
    for n in found:
        _delete_ns(n)
    return found


atexit.register(cleanup_all)


def _on_term(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so ``with`` blocks and atexit clean up."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, parent_only(_on_term))
        except (ValueError, OSError):
            pass


def ns_name(tag: str) -> str:
    global _counter
    _counter += 1
    return f"{NS_PREFIX}{os.getpid()}-{_counter}{'-' + tag if tag else ''}"[:60]


class Netns:
    """A throwaway namespace with a veth pair ``rb0``/``rb1`` (both ends inside
    and up, no addresses): the device a plan is installed on.  Deleted on exit."""

    def __init__(self, tag: str = "", *, veth: bool = True):
        self.name = ns_name(tag)
        self.veth = veth

    def __enter__(self) -> "Netns":
        if os.geteuid() != 0:
            raise BenchError("benchmarks need root (network namespaces)")
        run(["ip", "netns", "add", self.name])
        _LIVE.add(self.name)
        try:
            lines = ["link set lo up"]
            if self.veth:
                lines += [f"link add {DEV} type veth peer name {PEER}", f"link set {DEV} up",
                          f"link set {PEER} up"]
            run(["ip", "-n", self.name, "-batch", "-"], input="\n".join(lines) + "\n")
        except BaseException:
            _delete_ns(self.name)
            raise
        return self

    def __exit__(self, *exc) -> None:
        # an explicit root qdisc delete first: the kernel's namespace cleanup is
        # asynchronous and would otherwise tear down 60,000 classes during the
        # next measurement
        if self.veth:
            subprocess.run(["tc", "-n", self.name, "qdisc", "del", "dev", DEV, "root"],
                           capture_output=True, check=False)
        _delete_ns(self.name)

    def tc(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return run(["tc", "-n", self.name, *args], **kw)


# ---------------------------------------------------------------- the VM


def in_vm() -> bool:
    return os.environ.get("RATELIMIT_IN_VM") == "1"


def load_modules(modules: Iterable[str] = MODULES) -> None:
    """In the VM: load the traffic-control modules (a no-op where built in)."""
    for m in modules:
        subprocess.run(["modprobe", "-q", m], capture_output=True, check=False)


def host_has(*features: str) -> bool:
    """True if the running kernel takes every one of ``features`` (probe names)."""
    from ratelimit.kernel.probe import probe
    try:
        return all(probe(list(features)).values())
    except Exception:  # noqa: BLE001 - a probe that cannot run means "no"
        return False


def run_vm_part(part: str, args: Sequence[str], *, outdir: Path | str = RESULTS_DIR,
                timeout_s: float = 3600, memory: str = "2G") -> int:
    """Run ``python -m bench PART ARGS --in-vm`` in the full-kernel VM, results
    written to ``outdir`` (shared read-write); returns its exit status."""
    from ratelimit.kernel import vm
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "bench", part, *args, "--in-vm", "--out", str(outdir)]
    say(part, f"booting the stock kernel in a VM (software emulation, about 20 s): {' '.join(argv[1:])}")
    res = vm.run_vm(argv, cwd=str(REPO), rwdirs=[str(outdir)], env={"PYTHONPATH": str(REPO)},
                    timeout_s=timeout_s, memory=memory, cpus=os.cpu_count() or 1,
                    on_output=lambda line: print(f"[vm] {line}", file=sys.stderr, flush=True),
                    announce=False)
    say(part, f"VM finished: exit {res.exit_code}, guest kernel {res.guest_release}, "
              f"boot+shutdown {res.boot_s:.0f} s, benchmark {res.command_s:.0f} s")
    return res.exit_code
