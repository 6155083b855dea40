"""What the benchmarks read from /proc: the machine's and each CPU's time (``/proc/stat``),
processes' CPU time, waits for a CPU and memory (``/proc/PID/stat``, ``schedstat``,
``status``, ``smaps_rollup``), and the process tree; and how late a sleeping thread wakes
(``WakeMeter``), the machine as a process sees it."""

from __future__ import annotations

import os
import threading
import time

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
IDLE, IOWAIT, SOFTIRQ, STEAL = 3, 4, 6, 7  # fields of a /proc/stat cpu line


def ticks() -> list[list[int]]:
    """/proc/stat's cpu lines: [user, nice, system, idle, iowait, irq, softirq, steal] in
    clock ticks since boot, the machine's first, then each CPU's.  (The guest fields after
    them are counted in user and nice already.)"""
    with open("/proc/stat") as f:
        return [[int(x) for x in line.split()[1:9]] for line in f if line.startswith("cpu")]


def shares(before: list[list[int]], after: list[list[int]]) -> dict:
    """Between two ``ticks()``: the machine's and each CPU's busy, softirq, system, user, irq
    and steal (a virtual CPU's time taken by its hypervisor) shares of their time, and the
    window (seconds of one CPU)."""
    def one(a, b):
        d = [y - x for x, y in zip(a, b)]
        total = sum(d) or 1
        return {"busy": 1 - (d[IDLE] + d[IOWAIT]) / total, "softirq": d[SOFTIRQ] / total, "system": d[2] / total,
                "user": (d[0] + d[1]) / total, "irq": d[5] / total,
                "steal": d[STEAL] / total}
    cpus = max(1, len(after) - 1)
    return {"machine": one(before[0], after[0]), "per_cpu": [one(a, b) for a, b in zip(before[1:], after[1:])],
            "window_s": (sum(after[0]) - sum(before[0])) * TICK_S / cpus}


def times_s(pid: int) -> tuple[float, float, float, float]:
    """A process's (user, system, reaped children's user, their system) seconds so far
    (``/proc/PID/stat``; the kernel's work for a process's netlink messages is done in its
    own system calls, so it is counted in its system time)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return tuple(int(v) * TICK_S for v in fields[11:15])


def cpu_s(pid: int, children: bool = True) -> float:
    """A process's user + system seconds, with its reaped children's (``children``) or not."""
    return sum(times_s(pid)[:4 if children else 2])


def process_seconds(pids) -> dict[int, float]:
    """``cpu_s`` of each of these processes (a process gone: left out)."""
    out = {}
    for pid in pids:
        try:
            out[pid] = cpu_s(pid)
        except (OSError, ValueError, IndexError):
            continue
    return out


def waits(pids) -> tuple[int, int]:
    """These processes' time waiting for a CPU while runnable (ns) and their turns on one
    (``/proc/PID/schedstat``: on-CPU ns, run delay ns, turns)."""
    delay = turns = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                _, d, n = (int(v) for v in f.read().split())
        except (OSError, ValueError):
            continue
        delay, turns = delay + d, turns + n
    return delay, turns


def status_kb(pid: int) -> dict:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem (KiB) and Threads of ``pid``."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(rest.split()[0])
    return out


def pss_kb(pid: int) -> dict:
    """Pss and Pss_Anon (KiB) from ``smaps_rollup`` (empty where the kernel has none)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Pss_Anon"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        head, _, tail = text.rpartition(")")
        fields = tail.split()
        if len(fields) > 1:
            table[int(entry)] = (int(fields[1]), head.partition("(")[2])
    return table


def descendants(root: int, table: dict) -> list[int]:
    """Every process under ``root`` in a ``process_table``."""
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in kids.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


class WakeMeter:
    """How late a thread that sleeps ``tick_s`` at a time wakes, while the meter runs: a second
    reading of the machine beside the CPU's ticks.  A machine that stops for a moment (a
    hypervisor's pause, say) stretches every call then, and a 12 s window reads a 0.4 s stop as
    links 3.3% slow; the meter shows it as its longest lateness.

    >>> with WakeMeter() as m:
    ...     time.sleep(0.05)
    >>> m.summary()["late_max_ms"] >= 0
    True
    """

    def __init__(self, tick_s: float = 0.005):
        self.tick_s, self.late_s, self._stop = tick_s, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            time.sleep(self.tick_s)
            self.late_s.append(time.monotonic() - t0 - self.tick_s)

    def __enter__(self) -> "WakeMeter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        """The longest lateness, its 99th percentile and the sum of those over 50 ms, in ms."""
        late = sorted(self.late_s) or [0.0]
        return {"late_max_ms": 1e3 * late[-1], "late_p99_ms": 1e3 * late[int(0.99 * (len(late) - 1))],
                "late_over_50ms_sum_ms": 1e3 * sum(x for x in late if x > 0.05)}
