"""Kernel facts a trace driver is designed around (docs/traces-notes.md).  Root only.

    python -m bench.tracefacts outage METHOD   a TCP download through one HTB link whose
                                               capacity goes to "0" for 3 s (METHOD: frozen,
                                               timed, tbf-gate, tbf-gate-kick: ``OUTAGES``);
                                               prints JSON
    python -m bench.tracefacts changes N       Change operations of N links' HTB classes sent
                                               through our Executor in batches: changes/s, CPU

Everything runs in namespaces named ``rltr-*`` (removed at the start, at the end and on
failure), traffic in 198.18.70.0/24 and 198.18.71.0/24 only.

The outage link: router egress ``rltr-c`` towards the client, an HTB root without a
default class, one class 1:10 at ``RATE`` (quantum and bursts of one frame) whose leaf
holds ``QUEUE_BYTES``, and a u32 filter sending the client's address there.  The server
writes as fast as TCP lets it; the client reads and timestamps every receive.  After
``LEAD_S`` the link is held by the method's commands (``OUTAGES``), after ``OUTAGE_S``
opened again by its other commands, and the run goes on for ``TAIL_S``.  The class's and
the leaf's counters are read every ``SAMPLE_S`` over netlink, HTB's tokens (``tc``) at the
hold and the opening.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace

from pyroute2 import IPRoute

from ratelimit import service
from ratelimit.kernel.executor import Executor
from ratelimit.kernel.kick import Kicker
from ratelimit.plan.ops import Change
from ratelimit.plan.shaping import HtbClass

from .common import established, listening, wait_until

NS = {"cli": "rltr-cli", "rtr": "rltr-rtr", "srv": "rltr-srv"}
RATE = "2mbit"
RATE_BPS = 2_000_000
FRAME_BYTES = 1514
QUEUE_BYTES = 10 * FRAME_BYTES  # less than the download keeps in flight: the outage fills it
LEAD_S, OUTAGE_S, TAIL_S, SAMPLE_S = 4.0, 3.0, 8.0, 0.1
PORT = 5001
BURST_S, PACED_S, STEPS_MS = 3.0, 10.0, (100, 50)
CONNECT_S = 60.0  # the most a server may take to listen and a download to connect (a Python process each)

SERVER = r"""
import socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("198.18.71.2", int(sys.argv[1]))); l.listen(1)
c, _ = l.accept()
# from the download's start, as the client's: before the client's end (its seconds are one more)
end, chunk, sent = time.monotonic() + float(sys.argv[2]), b"x" * 65536, 0
c.settimeout(0.2)  # a stalled link must not keep the server past its end
while time.monotonic() < end:
    try:
        sent += c.send(chunk)
    except socket.timeout:
        continue
    except OSError as e:
        print("server error", e, file=sys.stderr); sys.exit(1)
c.close(); print(sent)
"""

CLIENT = r"""
import json, socket, sys, time
s = socket.create_connection(("198.18.71.2", int(sys.argv[1])))
s.settimeout(0.2)
out, got, err, end = [], 0, None, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:  # a stalled link holds the server's close back
    try:
        n = len(s.recv(4096))
    except socket.timeout:
        continue
    except OSError as e:
        err = str(e)
        break
    if not n:
        break
    got += n
    out.append((time.monotonic(), got))
print(json.dumps({"samples": out, "error": err}))
"""


def sh(*argv, check=True, ns=None):
    if ns:
        argv = ("ip", "netns", "exec", ns, *argv)
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def cleanup(ns: dict = NS) -> None:
    for name in ns.values():
        sh("ip", "netns", "del", name, check=False)


def topology(ns: dict = NS, queues: int = 1) -> None:
    """Client -- router -- server (namespaces ``ns``: cli, rtr, srv), 198.18.70.0/24 on the
    client side, .71 on the server's; the router's devices ``rltr-c`` (``queues`` tx queues)
    and ``rltr-s``."""
    cleanup(ns)
    for name in ns.values():
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
    sh("ip", "-n", ns["rtr"], "link", "add", "rltr-c", "numtxqueues", str(queues), "type", "veth", "peer", "name",
       "rltr-c0", "netns", ns["cli"])
    sh("ip", "-n", ns["rtr"], "link", "add", "rltr-s", "type", "veth", "peer", "name", "rltr-s0", "netns", ns["srv"])
    for name, dev, addr, gw in ((ns["cli"], "rltr-c0", "198.18.70.2/24", "198.18.70.1"),
                                (ns["srv"], "rltr-s0", "198.18.71.2/24", "198.18.71.1")):
        sh("ip", "-n", name, "addr", "add", addr, "dev", dev)
        sh("ip", "-n", name, "link", "set", dev, "up")
        sh("ip", "-n", name, "route", "add", "default", "via", gw)
    sh("ip", "-n", ns["rtr"], "addr", "add", "198.18.70.1/24", "dev", "rltr-c")
    sh("ip", "-n", ns["rtr"], "addr", "add", "198.18.71.1/24", "dev", "rltr-s")
    for dev in ("rltr-c", "rltr-s"):
        sh("ip", "-n", ns["rtr"], "link", "set", dev, "up")
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=ns["rtr"])
    # one segment per packet through the router (the link meters packets as frames)
    sh("ip", "-n", ns["srv"], "link", "set", "rltr-s0", "gso_max_segs", "1")


def shaped_link(leaf: list[str]) -> list[list[str]]:
    """The tc commands of the one shaped link, its leaf qdisc ``leaf``."""
    dev = ("dev", "rltr-c")
    return [["qdisc", "add", *dev, "root", "handle", "1:", "htb"],
            ["class", "add", *dev, "parent", "1:", "classid", "1:10", "htb", "rate", RATE, "ceil", RATE,
             "burst", f"{FRAME_BYTES}b", "cburst", f"{FRAME_BYTES}b", "quantum", str(FRAME_BYTES)],
            ["qdisc", "add", *dev, "parent", "1:10", "handle", "10:", *leaf],
            ["filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", "198.18.70.2/32", "flowid", "1:10"]]


def class_change(rate: str) -> list[str]:
    """Class 1:10 at ``rate`` (and ceil), bursts of one frame: what an in-place change sends."""
    return ["class", "change", "dev", "rltr-c", "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate,
            "burst", f"{FRAME_BYTES}b", "cburst", f"{FRAME_BYTES}b", "quantum", str(FRAME_BYTES)]


def leaf_change(leaf: list[str]) -> list[str]:
    return ["qdisc", "change", "dev", "rltr-c", "parent", "1:10", "handle", "10:", *leaf]


def tc(args) -> None:
    sh("tc", *args, ns=NS["rtr"])


_STATS = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+),.*?backlog (\d+)b.*?tokens: (-?\d+) ctokens: (-?\d+)",
                    re.S)
_LEAF = re.compile(r"qdisc \w+ 10:.*?Sent (\d+) bytes (\d+) pkt \(dropped (\d+),.*?backlog (\d+)b", re.S)


def class_stats() -> dict:
    """Class 1:10's counters and tokens (HTB's, in its own time units: ns x 64 / 1000 ticks,
    as tc prints them), and its leaf qdisc's drops and backlog."""
    text = sh("tc", "-s", "class", "show", "dev", "rltr-c", "classid", "1:10", ns=NS["rtr"]).stdout
    m = _STATS.search(text)
    out = dict(zip(("bytes", "packets", "drops", "backlog", "tokens", "ctokens"), map(int, m.groups())))
    leaf = _LEAF.search(sh("tc", "-s", "qdisc", "show", "dev", "rltr-c", ns=NS["rtr"]).stdout)
    out["leaf_drops"], out["leaf_backlog"] = int(leaf.group(3)), int(leaf.group(4))
    return out


class _NetlinkSampler:
    """Class 1:10's bytes and packets, and its leaf's drops and backlog, read over one
    rtnetlink socket in the router's namespace (``tc`` processes, two a sample, took 0.6 s a
    sample on a loaded machine, coarser than what the outage test times)."""

    def __init__(self):
        self.ipr = IPRoute(netns=NS["rtr"], flags=0)
        self.index = self.ipr.link_lookup(ifname="rltr-c")[0]

    def __call__(self) -> dict:
        out = {}
        for m in self.ipr.get_classes(index=self.index):
            if m["handle"] == 0x10010:
                basic = m.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")
                out.update(bytes=basic["bytes"], packets=basic["packets"])
        for m in self.ipr.get_qdiscs(index=self.index):
            if m["parent"] == 0x10010:
                queue = m.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")
                out.update(leaf_drops=queue["drops"], leaf_backlog=queue["backlog"])
        return out

    def close(self) -> None:
        self.ipr.close()


BFIFO = ["bfifo", "limit", str(QUEUE_BYTES)]
OPEN_TBF = ["tbf", "rate", "10gbit", "burst", "15140b", "limit", str(QUEUE_BYTES)]  # wide open: the class shapes
KICK = ("kick", "rltr-c")  # ratelimit.kernel.kick: one frame through the device's qdiscs
SHUT_TBF = ["tbf", "rate", "64bit", "burst", f"{FRAME_BYTES}b", "limit", str(QUEUE_BYTES)]  # one frame in 189 s
# method: (leaf, the outage's commands, the resume's commands)
OUTAGES = {
    # our FROZEN_BPS hold (diff.py): 8 bit/s, burst one frame; then back to RATE
    "frozen": (BFIFO, [class_change("8bit")], [class_change(RATE)]),
    # a rate at which one frame costs the outage's length: a packet that passes is paid for by its end
    "timed": (BFIFO, [class_change(f"{FRAME_BYTES * 8 / OUTAGE_S:.0f}bit")], [class_change(RATE)]),
    # the class keeps RATE; a token bucket as its leaf opens and shuts
    "tbf-gate": (OPEN_TBF, [leaf_change(SHUT_TBF)], [leaf_change(OPEN_TBF)]),
    # ... and a kick once it is open, as the driver does (plan/gate.py): the kernel does not
    # dequeue what the gate held until the device's next packet
    "tbf-gate-kick": (OPEN_TBF, [leaf_change(SHUT_TBF)], [leaf_change(OPEN_TBF), KICK]),
}


def _run(args) -> None:
    """One command of a method: tc's arguments, or ``KICK`` (a kick on the link's device)."""
    if args is KICK:
        with Kicker(NS["rtr"]) as kicker:
            kicker.kick("rltr-c", 1)
    else:
        tc(args)


def outage(method: str, lead_s: float = LEAD_S, outage_s: float = OUTAGE_S, tail_s: float = TAIL_S) -> dict:
    """One download through the link, its capacity at "0" from ``lead_s`` for ``outage_s``
    by ``method``, watched for ``tail_s`` after; what it saw (see the module docstring)."""
    if method not in OUTAGES:
        raise SystemExit(f"outage: method {method!r} is not one of {', '.join(OUTAGES)}")
    leaf, hold, resume = OUTAGES[method]
    topology()
    for args in shaped_link(leaf):
        tc(args)
    total = lead_s + outage_s + tail_s
    server = subprocess.Popen(["ip", "netns", "exec", NS["srv"], sys.executable, "-c", SERVER, str(PORT),
                               str(total + 1)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        wait_until(lambda: listening(NS["srv"], PORT), CONNECT_S, "the outage's server to listen")
        client = subprocess.Popen(["ip", "netns", "exec", NS["cli"], sys.executable, "-c", CLIENT, str(PORT),
                                   str(total + 2)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the lead is timed from the download's connection, not from the client's start
        wait_until(lambda: established(NS["srv"], PORT), CONNECT_S, "the outage's download to connect")
        return _watch(method, hold, resume, server, client, (lead_s, outage_s, tail_s))
    finally:
        for p in (server, client):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def _watch(method, hold, resume, server, client, times) -> dict:
    lead_s, outage_s, tail_s = times
    total = sum(times)
    stats, marks = [], {}
    stop = threading.Event()

    def sampler():
        read = _NetlinkSampler()
        try:
            while not stop.is_set():
                got = read()  # in this process, about 0.3 ms: a busy machine does not stretch the samples
                stats.append((time.monotonic(), got))  # the time the reading was made
                time.sleep(SAMPLE_S)
        finally:
            read.close()

    thread = threading.Thread(target=sampler)
    start = time.monotonic()
    thread.start()
    time.sleep(lead_s)  # the experiment's timeline (from the download's connection): the lead, the outage, the tail
    marks["before_hold"] = class_stats()
    for args in hold:
        _run(args)
    marks["held_at"] = time.monotonic()
    marks["after_hold"] = class_stats()
    time.sleep(outage_s)
    marks["before_resume"] = class_stats()
    marks["resume_at"] = time.monotonic()
    for args in resume:
        _run(args)
    marks["resumed_at"] = time.monotonic()
    time.sleep(max(0.0, start + total - time.monotonic()))
    stop.set()
    thread.join()
    marks["end"] = class_stats()
    _, err = server.communicate(timeout=30)
    cout, _ = client.communicate(timeout=30)
    received = json.loads(cout)
    samples = received["samples"]
    t_hold, t_resume, t_resumed = marks["held_at"], marks["resume_at"], marks["resumed_at"]

    def got(t):
        return max((n for ts, n in samples if ts <= t), default=0)

    def bps(a, b):
        return round((got(b) - got(a)) * 8 / (b - a))

    after = [ts for ts, n in samples if ts > t_resumed]
    held, resumed = marks["after_hold"], marks["before_resume"]
    return {
        "method": method, "rate_bps": RATE_BPS, "queue_bytes": QUEUE_BYTES, "outage_s": outage_s,
        "hold": [" ".join(a) for a in hold], "resume": [" ".join(a) for a in resume],
        "client_error": received["error"], "server_stderr": err.strip(),
        "received_in_outage_after_50ms_bytes": got(t_resume) - got(t_hold + 0.05),
        "received_in_outage_first_50ms_bytes": got(t_hold + 0.05) - got(t_hold),
        "class_sent_in_outage_packets": resumed["packets"] - held["packets"],
        "class_sent_in_outage_bytes": resumed["bytes"] - held["bytes"],
        "leaf_drops_in_outage": resumed["leaf_drops"] - held["leaf_drops"],
        "leaf_backlog_at_resume_bytes": resumed["leaf_backlog"],
        "class_tokens_before_resume": (resumed["tokens"], resumed["ctokens"]),
        "first_bytes_after_resume_s": round(after[0] - t_resumed, 3) if after else None,
        "class_first_sent_after_resume_s": next((round(t - t_resumed, 3) for t, s in stats
                                                 if t > t_resumed and s["packets"] > resumed["packets"]), None),
        "payload_bps_last_2s_before": bps(t_hold - 2, t_hold),
        "class_bps_last_2s_before": _class_bps(stats, t_hold - 2, t_hold),
        "class_bps_2s_to_end": _class_bps(stats, t_resumed + 2, t_resumed + tail_s - 0.2),
        "payload_bps_0_to_2s_after": bps(t_resumed, t_resumed + 2),
        "payload_bps_2s_to_end": bps(t_resumed + 2, t_resumed + tail_s - 0.2),
        "series_t_leafbacklog_leafdrops": [(round(t - start, 1), s["leaf_backlog"], s["leaf_drops"])
                                           for t, s in stats][::5],
    }


def _class_bps(stats, a: float, b: float):
    """The class's rate (frames, as HTB counts them) between the samples nearest ``a`` and ``b``."""
    (ta, sa), (tb, sb) = (min(stats, key=lambda x: abs(x[0] - t)) for t in (a, b))
    return round((sb["bytes"] - sa["bytes"]) * 8 / (tb - ta)) if tb > ta else None


def changes(n: int) -> dict:
    """N links built by ratelimit (shape, per port, one direction: 1,000 ports per host) on a
    veth in namespace rltr-rtr, no traffic.  A round is one ``Executor.apply`` of a Change of
    every link's class to a new rate (what a driver's step sends).  Rounds back to back for
    ``BURST_S``, then one round every step of ``STEPS_MS`` for ``PACED_S`` each: wall time
    and this process's user and system CPU (the kernel's work on the netlink messages runs
    in our system calls, so it is counted here)."""
    state = os.environ["RATELIMIT_STATE_DIR"] = tempfile.mkdtemp(prefix="rltr-state-")  # no record left behind
    try:
        return _changes(n)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _changes(n: int) -> dict:
    cleanup()
    sh("ip", "netns", "add", NS["rtr"])
    sh("ip", "-n", NS["rtr"], "link", "add", "rltr-c", "type", "veth", "peer", "name", "rltr-c0")
    sh("ip", "-n", NS["rtr"], "link", "set", "rltr-c", "up")
    hosts = max(1, -(-n // 1000))
    last = f"198.18.70.{1 + hosts}"
    req = service.make_request("rltr-c", netns=NS["rtr"], hosts=f"198.18.70.2-{last}" if hosts > 1 else "198.18.70.2",
                               ports=f"10000-{10000 + n // hosts - 1}", mode="shape", direction="dest",
                               rate="1mbit")
    plan = service.apply(req)
    classids = {f.classid for f in plan.flows}
    links = [op for op in plan.ops if type(op) is HtbClass and op.classid in classids]
    ex = Executor(NS["rtr"])
    k = 0

    def one_round():
        nonlocal k
        k += 1
        rate = 1_000_000 + 8_000 * k
        ex.apply([Change(replace(op, rate_bps=rate, ceil_bps=rate)) for op in links])

    for _ in range(2):  # warm the encoder's caches
        one_round()
    # back to back: the most this process sends
    c0, w0 = _cpu(), time.monotonic()
    rounds = 0
    while time.monotonic() - w0 < BURST_S:
        one_round()
        rounds += 1
    burst_wall, burst_cpu = time.monotonic() - w0, _cpu() - c0
    # paced: one round per step, as a driver would
    paced = {}
    for step_ms in STEPS_MS:
        c0, w0 = _cpu(), time.monotonic()
        late = 0
        for i in range(int(PACED_S * 1000 / step_ms)):
            due = w0 + i * step_ms / 1000
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                late += 1
            one_round()
        wall = time.monotonic() - w0
        cpu = _cpu() - c0
        paced[step_ms] = {"rounds": i + 1, "wall_s": round(wall, 2), "cpu_pct_of_a_core": round(100 * cpu[0] / wall, 1),
                          "user_s": round(cpu[1], 2), "sys_s": round(cpu[2], 2), "late_rounds": late}
    shown = sh("tc", "class", "show", "dev", "rltr-c", "classid", f"{links[-1].classid >> 16:x}:{links[-1].classid & 0xffff:x}",
               ns=NS["rtr"]).stdout.split()
    service.clean("rltr-c", NS["rtr"])
    cleanup()
    return {"links": len(links), "burst_rounds": rounds, "burst_s_per_round": round(burst_wall / rounds, 4),
            "burst_changes_per_s": round(len(links) * rounds / burst_wall),
            "burst_cpu_pct_of_a_core": round(100 * burst_cpu[0] / burst_wall, 1),
            "paced": paced, "last_rate_read_back": shown[shown.index("rate") + 1], "last_rate_set_bps": 1_000_000 + 8_000 * k}


def _cpu() -> tuple:
    """(user + system, user, system) CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return _Cpu((r.ru_utime + r.ru_stime, r.ru_utime, r.ru_stime))


class _Cpu(tuple):
    def __sub__(self, other):
        return tuple(a - b for a, b in zip(self, other))


def main(argv) -> int:
    if os.geteuid() != 0:
        print("tracefacts: needs root", file=sys.stderr)
        return 4
    try:
        if argv[:1] == ["outage"] and len(argv) == 2:
            print(json.dumps(outage(argv[1]), indent=1))
        elif argv[:1] == ["changes"] and len(argv) == 2:
            print(json.dumps(changes(int(argv[1])), indent=1))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    finally:
        cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
