"""Kernel facts a trace driver is designed around (docs/traces-notes.md).  Root only.

    python -m bench.tracefacts outage METHOD   a TCP download through one HTB link whose
                                               capacity goes to "0" for 3 s (METHOD: frozen,
                                               frozen-timed); prints JSON
    python -m bench.tracefacts changes N       Change operations of N links' HTB classes sent
                                               through our Executor in batches: changes/s, CPU

Everything runs in namespaces named ``rltr-*`` (removed at the start, at the end and on
failure), traffic in 198.18.70.0/24 and 198.18.71.0/24 only.

The outage link: router egress ``rltr-c`` towards the client, an HTB root without a
default class, one class 1:10 at ``RATE`` (quantum and bursts of one frame) with a
``bfifo`` of ``QUEUE_BYTES``, and a u32 filter sending the client's address there.  The
server writes as fast as TCP lets it; the client reads and timestamps every receive.
After ``LEAD_S`` the class is changed to the outage, after ``OUTAGE_S`` back to ``RATE``,
and the run goes on for ``TAIL_S``.  The class's counters are read every ``SAMPLE_S``.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

NS = {"cli": "rltr-cli", "rtr": "rltr-rtr", "srv": "rltr-srv"}
RATE = "2mbit"
RATE_BPS = 2_000_000
QUEUE_BYTES = 60_000
FRAME_BYTES = 1514
LEAD_S, OUTAGE_S, TAIL_S, SAMPLE_S = 4.0, 3.0, 8.0, 0.1
PORT = 5001

SERVER = r"""
import socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("198.18.71.2", int(sys.argv[1]))); l.listen(1)
c, _ = l.accept()
end, chunk, sent = time.monotonic() + float(sys.argv[2]), b"x" * 65536, 0
try:
    while time.monotonic() < end:
        sent += c.send(chunk)
except OSError as e:
    print("server error", e, file=sys.stderr); sys.exit(1)
c.close(); print(sent)
"""

CLIENT = r"""
import json, socket, sys, time
s = socket.create_connection(("198.18.71.2", int(sys.argv[1])))
out, got, err = [], 0, None
try:
    while True:
        n = len(s.recv(65536))
        if not n:
            break
        got += n
        out.append((time.monotonic(), got))
except OSError as e:
    err = str(e)
print(json.dumps({"samples": out, "error": err}))
"""


def sh(*argv, check=True, ns=None):
    if ns:
        argv = ("ip", "netns", "exec", ns, *argv)
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def cleanup() -> None:
    for name in NS.values():
        sh("ip", "netns", "del", name, check=False)


def topology() -> None:
    """Client -- router -- server, 198.18.70.0/24 on the client side, .71 on the server's."""
    cleanup()
    for name in NS.values():
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
    sh("ip", "-n", NS["rtr"], "link", "add", "rltr-c", "type", "veth", "peer", "name", "rltr-c0", "netns", NS["cli"])
    sh("ip", "-n", NS["rtr"], "link", "add", "rltr-s", "type", "veth", "peer", "name", "rltr-s0", "netns", NS["srv"])
    for ns, dev, addr, gw in ((NS["cli"], "rltr-c0", "198.18.70.2/24", "198.18.70.1"),
                              (NS["srv"], "rltr-s0", "198.18.71.2/24", "198.18.71.1")):
        sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", gw)
    sh("ip", "-n", NS["rtr"], "addr", "add", "198.18.70.1/24", "dev", "rltr-c")
    sh("ip", "-n", NS["rtr"], "addr", "add", "198.18.71.1/24", "dev", "rltr-s")
    for dev in ("rltr-c", "rltr-s"):
        sh("ip", "-n", NS["rtr"], "link", "set", dev, "up")
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=NS["rtr"])
    # one segment per packet through the router (the link meters packets as frames)
    sh("ip", "-n", NS["srv"], "link", "set", "rltr-s0", "gso_max_segs", "1")


def shaped_link() -> list[list[str]]:
    """The tc commands of the one shaped link (also printed for the notes)."""
    dev = ("dev", "rltr-c")
    return [["qdisc", "add", *dev, "root", "handle", "1:", "htb"],
            ["class", "add", *dev, "parent", "1:", "classid", "1:10", "htb", "rate", RATE, "ceil", RATE,
             "burst", f"{FRAME_BYTES}b", "cburst", f"{FRAME_BYTES}b", "quantum", str(FRAME_BYTES)],
            ["qdisc", "add", *dev, "parent", "1:10", "handle", "10:", "bfifo", "limit", str(QUEUE_BYTES)],
            ["filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", "198.18.70.2/32", "flowid", "1:10"]]


def class_change(rate: str, burst: str) -> list[str]:
    return ["class", "change", "dev", "rltr-c", "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate,
            "burst", burst, "cburst", burst, "quantum", str(FRAME_BYTES)]


def tc(args) -> None:
    sh("tc", *args, ns=NS["rtr"])


_STATS = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+),.*?backlog (\d+)b.*?tokens: (-?\d+) ctokens: (-?\d+)", re.S)


def class_stats() -> dict:
    """Class 1:10's counters, its backlog and its tokens (HTB's, in its own time units)."""
    text = sh("tc", "-s", "class", "show", "dev", "rltr-c", "classid", "1:10", ns=NS["rtr"]).stdout
    m = _STATS.search(text)
    keys = ("bytes", "packets", "drops", "backlog", "tokens", "ctokens")
    return dict(zip(keys, map(int, m.groups())))


OUTAGES = {
    # our FROZEN_BPS hold (diff.py): 8 bit/s, burst one quantum; back to RATE at once
    "frozen": (("8bit", f"{FRAME_BYTES}b"), None),
    # the same hold, then a last step before RATE (see ``outage``)
    "frozen-timed": (("8bit", f"{FRAME_BYTES}b"), None),
}


def outage(method: str) -> dict:
    if method not in OUTAGES:
        raise SystemExit(f"outage: method {method!r} is not one of {', '.join(OUTAGES)}")
    (hold_rate, hold_burst), _ = OUTAGES[method]
    topology()
    for args in shaped_link():
        tc(args)
    total = LEAD_S + OUTAGE_S + TAIL_S
    server = subprocess.Popen(["ip", "netns", "exec", NS["srv"], sys.executable, "-c", SERVER, str(PORT),
                               str(total + 1)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    client = subprocess.Popen(["ip", "netns", "exec", NS["cli"], sys.executable, "-c", CLIENT, str(PORT)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stats, marks = [], {}
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            stats.append((time.monotonic(), class_stats()))
            time.sleep(SAMPLE_S)

    thread = threading.Thread(target=sampler)
    start = time.monotonic()
    thread.start()
    time.sleep(LEAD_S)
    marks["before_change"] = class_stats()
    marks["change_at"] = time.monotonic()
    tc(class_change(hold_rate, hold_burst))
    marks["changed_at"] = time.monotonic()
    marks["after_change"] = class_stats()
    time.sleep(OUTAGE_S)
    marks["before_resume"] = class_stats()
    marks["resume_at"] = time.monotonic()
    if method == "frozen-timed":
        # how long the class stays stalled after the resume, if it does
        pass
    tc(class_change(RATE, f"{FRAME_BYTES}b"))
    marks["resumed_at"] = time.monotonic()
    time.sleep(max(0.0, start + total - time.monotonic()))
    stop.set()
    thread.join()
    out, err = server.communicate(timeout=30)
    cout, cerr = client.communicate(timeout=30)
    received = json.loads(cout)
    samples = received["samples"]
    t_change, t_resume = marks["changed_at"], marks["resume_at"]

    def got(t):
        return max((n for ts, n in samples if ts <= t), default=0)

    after = [ts for ts, n in samples if ts > marks["resumed_at"]]
    rate_windows = {}
    for name, (a, b) in {"lead_last_2s": (t_change - 2, t_change), "tail_s2_to_s6": (marks["resumed_at"] + 2,
                                                                                      marks["resumed_at"] + 6)}.items():
        rate_windows[name] = (got(b) - got(a)) * 8 / (b - a)
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    return {
        "method": method, "rate_bps": RATE_BPS, "queue_bytes": QUEUE_BYTES,
        "client_error": received["error"], "server_exit": server.returncode, "server_stderr": err.strip(),
        "received_bytes_total": samples[-1][1] if samples else 0,
        "received_during_outage": got(t_resume) - got(t_change + 0.05),
        "received_first_50ms_of_outage": got(t_change + 0.05) - got(t_change),
        "class_sent_during_outage_bytes": marks["before_resume"]["bytes"] - marks["after_change"]["bytes"],
        "class_sent_during_outage_packets": marks["before_resume"]["packets"] - marks["after_change"]["packets"],
        "class_sent_around_change_packets": marks["after_change"]["packets"] - marks["before_change"]["packets"],
        "drops_during_outage": marks["before_resume"]["drops"] - marks["after_change"]["drops"],
        "backlog_at_resume": marks["before_resume"]["backlog"],
        "first_byte_after_resume_s": (after[0] - marks["resumed_at"]) if after else None,
        "longest_gap_s": max(gaps) if gaps else None,
        "payload_bps": rate_windows,
        "marks": {k: v for k, v in marks.items() if isinstance(v, dict)},
        "series_t_backlog_drops_tokens": [(round(t - start, 2), s["backlog"], s["drops"], s["tokens"]) for t, s in stats][::5],
    }


def changes(n: int) -> dict:
    """N links built by ratelimit (shape, per port, one direction) in namespace rltr-rtr;
    then rounds of Change of every link's class to a new rate through the Executor."""
    from ratelimit import service
    from ratelimit.kernel.executor import Executor
    from ratelimit.plan import Change, HtbClass
    from dataclasses import replace
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
    links = [op for op in plan.ops if type(op) is HtbClass and op.mpu_bytes is not None and op.parent != 0
             and any(f.classid == op.classid for f in plan.flows[:1])] or []
    classids = {f.classid for f in plan.flows}
    links = [op for op in plan.ops if type(op) is HtbClass and op.classid in classids]
    ex = Executor(NS["rtr"])
    rounds = []
    for k in range(12):
        rate = 1_000_000 + 8_000 * (k + 1)
        ops = [Change(replace(op, rate_bps=rate, ceil_bps=rate)) for op in links]
        r0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
        ex.apply(ops)
        r1, c1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
        rounds.append({"wall_s": r1 - r0, "user_s": c1.ru_utime - c0.ru_utime, "sys_s": c1.ru_stime - c0.ru_stime})
    rounds = rounds[2:]  # the first two warm the encoder's caches
    wall = sorted(r["wall_s"] for r in rounds)
    cpu = sorted(r["user_s"] + r["sys_s"] for r in rounds)
    service.clean("rltr-c", NS["rtr"])
    cleanup()
    return {"links": len(links), "rounds": len(rounds), "wall_s_median": wall[len(wall) // 2],
            "wall_s_max": wall[-1], "cpu_s_median": cpu[len(cpu) // 2],
            "changes_per_s": len(links) / wall[len(wall) // 2],
            "user_s_median": sorted(r["user_s"] for r in rounds)[len(rounds) // 2],
            "sys_s_median": sorted(r["sys_s"] for r in rounds)[len(rounds) // 2]}


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
