"""Paced UDP load through traced links, scored against the capacity the links follow.  Root only.

The topology is ``tracefacts.topology``'s in namespaces ``rltr-TAG-s``, ``-r``, ``-c``
(removed by ``cleanup(tag)``): a server namespace sends, the router forwards and shapes its
egress towards the client (``rltr-c``: the traced links, ``--direction dest``, a link per
client port), the client namespace receives.  Addresses in 198.18.70.0/24 (client side)
and 198.18.71.0/24 (server side) only.

* ``Sender`` (in the server namespace): one UDP socket; link ``i`` (client port
  ``PORT0 + i``) is sent datagrams of ``payload`` bytes paced at ``factor`` times its
  capacity (the same ``capacity`` model the driver follows, from the plan's start and the
  link's phase, averaged over ``SLICE_MS``), after a first burst that fills its queue; every
  link's send times are worked out first, then sent in time order.
* ``Receiver`` (in the client namespace): a packet socket on the client's device takes
  every UDP datagram with the kernel's receive time (``SO_TIMESTAMPNS``, wall clock) and
  writes (time, port, IP length) records to a file.
* ``score``: per link, the bytes delivered (as the class meters them: the frame, IP length
  + 14, at least 64) in windows against the capacity of the same window, in the same
  metering (``reference``); windows at random offsets.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
from array import array
from bisect import bisect_left
from pathlib import Path

from ratelimit import SOURCE_ROOT

from . import tracefacts

PORT0 = 20000
CLIENT, SERVER = "198.18.70.2", "198.18.71.2"  # bench.tracefacts' topology
DEV, CLIENT_DEV, ETH_HEADER_BYTES = "rltr-c", "rltr-c0", 14
SLICE_MS = 20  # the sender paces each link at its capacity averaged over slices this long


def names(tag: str) -> dict:
    return {"cli": f"rltr-{tag}-c", "rtr": f"rltr-{tag}-r", "srv": f"rltr-{tag}-s"}


def cleanup(tag: str) -> None:
    from ratelimit.kernel.netns import delete_namespaces
    delete_namespaces(list(names(tag).values()))


def topology(tag: str) -> dict:
    """Server -- router -- client (``tracefacts.topology``); returns the namespaces' names."""
    ns = names(tag)
    tracefacts.topology(ns)
    # no port-unreachable replies from the client for the datagrams nobody reads
    tracefacts.sh("sysctl", "-qw", "net.ipv4.icmp_ratelimit=1000000", "net.ipv4.icmp_ratemask=0", ns=ns["cli"])
    return ns


def _python(netns: str, code: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH"))
                                                       if p))
    return subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", code, *args], env=env, **kw)


# ---------------------------------------------------------------- the sender

SENDER = r"""
import json, socket, sys, time
from ratelimit.steps import traced_links
from ratelimit import state, tracespec
from ratelimit.compile import compile_plan
from bench.traceload import reference
cfg = json.load(open(sys.argv[1]))
req = state.request_from_json(cfg["request"], "sender")
srcs = {s.path: tracespec.load(s) for c in req.cohorts if c.trace for s in (c.trace.down, c.trace.up) if s}
links = [l for l in traced_links(compile_plan(req), srcs) if l.direction == "dest"]
started, frame, factor, slice_ms = cfg["started_ms"], cfg["frame_bytes"], cfg["factor"], %(slice)d
# ms of the plan's time, after the time it takes to make the schedule (about 3 ms a link for 20 s, measured)
begin = time.time() * 1000 - started + 2000 + 3 * len(links) * cfg["seconds"] / 20
end = begin + cfg["seconds"] * 1000
plan = []  # (ms of the plan's time, port): each link's datagrams where its paced cumulative crosses a whole one
for i, l in enumerate(links):
    due, t = cfg["prefill"] + i / len(links), begin
    while t < end:
        got = factor * reference(l, t - l.offset_ms, t + slice_ms - l.offset_ms) / frame
        while due <= got:
            plan.append((t + slice_ms * due / got, l.port))
            due += 1
        due -= got
        t += slice_ms
plan.sort()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 24)
s.setblocking(False)
data, dst, errors = bytes(cfg["payload"]), cfg["dst"], 0
for at, port in plan:
    wait = (at + started) / 1000 - time.time()
    if wait > 0.0005:
        time.sleep(wait)
    try:
        s.sendto(data, (dst, port))
    except OSError:
        errors += 1
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"sent": len(plan), "errors": errors, "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
                  "end_ms": end + started, "late_ms": round(max(0.0, time.time() * 1000 - started - end), 1)}))
""" % {"slice": SLICE_MS}

# ---------------------------------------------------------------- the receiver

RECEIVER = r"""
import socket, struct, sys, time
from array import array
import os
dev, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]  # until OUT.stop exists, at most SECONDS
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 25)
s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)  # SCM_TIMESTAMPNS
s.bind((dev, 0x0800))
s.settimeout(0.2)
ts, ports, lens = array("q"), array("i"), array("i")
end = time.time() + seconds
stamp = struct.Struct("=qq")
print("ready", flush=True)
while time.time() < end:
    if len(ts) % 4096 == 0 and os.path.exists(out + ".stop"):
        break
    try:
        data, anc, _, _ = s.recvmsg(64, 64)
    except socket.timeout:
        if os.path.exists(out + ".stop"):
            break
        continue
    if len(data) < 24 or data[9] != 17:
        continue
    hl = (data[0] & 15) * 4
    sec, ns = stamp.unpack_from(anc[0][2]) if anc else (0, 0)
    ts.append(sec * 10**9 + ns)
    ports.append(int.from_bytes(data[hl + 2:hl + 4], "big"))
    lens.append(int.from_bytes(data[2:4], "big"))
with open(out, "wb") as f:
    for a in (ts, ports, lens):
        f.write(struct.pack("=q", len(a)))
        a.tofile(f)
"""


def read_records(path: Path) -> tuple[array, array, array]:
    out = []
    with open(path, "rb") as f:
        for code in ("q", "i", "i"):
            n = struct.unpack("=q", f.read(8))[0]
            a = array(code)
            a.fromfile(f, n)
            out.append(a)
    return tuple(out)


def send_and_receive(ns: dict, req, started_ms: int, seconds: float, workdir: Path, *, payload: int, factor: float,
                     prefill: int) -> tuple[dict, tuple]:
    """Pace every traced link of ``req`` (its record's request, started at ``started_ms``)
    for ``seconds``; returns the sender's counts and the receiver's records."""
    from ratelimit import state
    cfg = workdir / "sender.json"
    frame = payload + 28 + ETH_HEADER_BYTES
    cfg.write_text(json.dumps({"request": state.to_json(req), "started_ms": started_ms, "frame_bytes": frame,
                               "factor": factor, "payload": payload, "dst": CLIENT, "seconds": seconds,
                               "prefill": prefill}))
    out = workdir / "received.bin"
    receiver = _python(ns["cli"], RECEIVER, CLIENT_DEV, str(seconds + 300), str(out), stdout=subprocess.PIPE,
                       text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        sender = _python(ns["srv"], SENDER, str(cfg), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sout, serr = sender.communicate(timeout=seconds + 240)
        if sender.returncode != 0:
            raise RuntimeError(f"sender failed: {serr.strip()[-500:]}")
        time.sleep(1.5)  # the last datagrams through their queues
        Path(str(out) + ".stop").touch()
        receiver.wait(timeout=30)
    finally:
        for p in (receiver,):
            if p.poll() is None:
                p.kill()
                p.wait()
    return json.loads(sout), read_records(out)


# ---------------------------------------------------------------- scoring


def per_link(records: tuple, ports: list[int]) -> dict:
    """port -> (receive times in ms, cumulative metered bytes after each), in time order."""
    ts, pp, ll = records
    rows: dict = {p: [] for p in ports}
    for t, p, n in zip(ts, pp, ll):
        row = rows.get(p)
        if row is not None:
            row.append((t / 1e6, max(64, n + ETH_HEADER_BYTES)))
    out = {}
    for p, row in rows.items():
        row.sort()
        times, cum, total = [], [], 0
        for t, n in row:
            total += n
            times.append(t)
            cum.append(total)
        out[p] = (times, cum)
    return out


def delivered(times: list, cum: list, t0: float, t1: float) -> int:
    a, b = bisect_left(times, t0), bisect_left(times, t1)
    return (cum[b - 1] if b else 0) - (cum[a - 1] if a else 0)


def reference(link, t0_ms: float, t1_ms: float) -> float:
    """What ``link`` should deliver over [t0, t1) of its own time, in the bytes its class
    meters: a schedule's capacity as it is (its class gets the line's share already); a
    trace's opportunities each as one full-size frame of the link layer (1,514 bytes on
    Ethernet, not mm-link's 1,504: the class rate passes full-size packets exactly as
    mm-link does, and every packet at that metered rate; docs/profiles.md)."""
    from ratelimit.capacity import FULL_IP_BYTES, TraceCapacity, metered_bytes
    c = link.capacity
    if isinstance(c, TraceCapacity):
        return c.opportunities(t0_ms, t1_ms) * c.scale * metered_bytes(FULL_IP_BYTES, link.layer)
    return c.bytes(t0_ms, t1_ms)


def score(records: tuple, links: list, started_ms: int, t0_ms: float, t1_ms: float, frame_bytes: int,
          windows=((1000, 0.02, 20), (100, 0.10, 60)), seed: int = 1) -> dict:
    """The delivered bytes against the capacity (``link.capacity`` in the plan's time,
    from ``started_ms``) over [t0, t1) (wall clock, ms): the mean over all links, and per
    window length (ms, tolerance, windows per link) the p95 of each window's relative error
    and of its error in tolerances (the tolerance, or one datagram, whichever is larger)."""
    rng = random.Random(seed)
    rows = per_link(records, [link.port for link in links])
    total_got = total_cap = 0.0
    out = {}
    errs: dict = {w: ([], []) for w, _, _ in windows}
    for link in links:
        times, cum = rows[link.port]

        def cap(a, b, link=link):
            return reference(link, a - started_ms - link.offset_ms, b - started_ms - link.offset_ms)
        total_got += delivered(times, cum, t0_ms, t1_ms)
        total_cap += cap(t0_ms, t1_ms)
        for w, tol, count in windows:
            for _ in range(count):
                a = rng.uniform(t0_ms, t1_ms - w)
                c, g = cap(a, a + w), delivered(times, cum, a, a + w)
                errs[w][0].append(abs(g - c) / c if c else (0.0 if not g else float("inf")))
                errs[w][1].append(abs(g - c) / max(tol * c, frame_bytes))
    out["mean_ratio"] = total_got / total_cap
    for w, tol, _ in windows:
        rel, tols = (sorted(x) for x in errs[w])
        out[f"p95_error_{w}ms"] = rel[int(0.95 * (len(rel) - 1))]
        out[f"p95_tolerances_{w}ms"] = tols[int(0.95 * (len(tols) - 1))]
        out[f"worst_tolerances_{w}ms"] = tols[-1]
    return out


def cpu_s(pid: int, split: bool = False):
    """A process's user + system time so far (``/proc/PID/stat``: the kernel's work for its
    netlink messages is done in its own system calls, so it is counted); ``split``: the
    two apart."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    user, system = (int(fields[i]) / os.sysconf("SC_CLK_TCK") for i in (11, 12))
    return (user, system) if split else user + system


def traced_run(tag: str, seconds: float, workdir: Path, *, links: int, payload: int = 1472,
               factor: float = 1.1, prefill: int = 4, settle_s: float = 3.0, step_ms: int | None = None,
               **request) -> dict:
    """Apply ``links`` traced links (a link per client port, ``--direction dest``; ``request``:
    the rest of ``service.make_request``'s options, a ``schedule`` or ``trace_down`` among
    them; the driver started after the apply, at ``step_ms``), pace each at ``factor`` times its capacity for
    ``seconds``, remove it all; the score over the run less its first ``settle_s`` and last
    half second (``score``), the sender's counts and the driver's last status."""
    from ratelimit import follow, service, state, tracespec
    from ratelimit.compile import compile_plan
    from ratelimit.steps import traced_links
    ns = topology(tag)
    try:
        req = service.make_request(DEV, netns=ns["rtr"], hosts=CLIENT, ports=f"{PORT0}-{PORT0 + links - 1}",
                                   direction="dest", **request)
        service.apply(req, follow=False)
        pid = follow.start(ns["rtr"], DEV, step_ms)
        req = state.load(ns["rtr"], DEV).request
        started = req.cohorts[0].trace.started_ms
        loaded = {s.path: tracespec.load(s) for c in req.cohorts if c.trace for s in (c.trace.down, c.trace.up) if s}
        traced = [link for link in traced_links(compile_plan(req), loaded) if link.direction == "dest"]
        cpu0, t0 = cpu_s(pid), time.monotonic()
        sent, records = send_and_receive(ns, req, started, seconds, workdir, payload=payload, factor=factor,
                                         prefill=prefill)
        driver = follow.read_status(ns["rtr"], DEV)
        driver["cpu_share"] = round((cpu_s(pid) - cpu0) / (time.monotonic() - t0), 4)  # of one core
        first, last = records[0][0] / 1e6, records[0][-1] / 1e6  # the receiver runs on after the sender's end
        result = score(records, traced, started, first + settle_s * 1000, min(last, sent["end_ms"]) - 500,
                       payload + 28 + ETH_HEADER_BYTES)
        return {**result, "sent": sent, "received": len(records[0]), "driver": driver}
    finally:
        try:
            service.clean(DEV, ns["rtr"])
        finally:
            cleanup(tag)


def main(argv=None) -> int:
    """``python -m bench.traceload --links N --seconds S (--schedule F | --trace-down F) [...]``:
    one ``traced_run``, its score as JSON (root; namespaces rltr-<pid>-*)."""
    import argparse
    import tempfile
    p = argparse.ArgumentParser(prog="python -m bench.traceload", description=traced_run.__doc__)
    p.add_argument("--links", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--settle", type=float, default=3.0, help="seconds left out at the start")
    for option in ("--schedule", "--trace-down", "--trace-scale", "--phase", "--phase-seed"):
        p.add_argument(option)
    p.add_argument("--queue", default="6056b")
    p.add_argument("--bandwidth", default="1gbit")
    p.add_argument("--payload", type=int, default=1472, help="UDP payload bytes of each datagram")
    p.add_argument("--step", type=int, default=None, help="the driver's step, ms")
    args = p.parse_args(argv)
    request = {k: v for k, v in vars(args).items() if k in ("schedule", "trace_down", "trace_scale", "phase",
                                                            "phase_seed", "queue", "bandwidth") and v is not None}
    with tempfile.TemporaryDirectory() as workdir:
        os.environ.setdefault("RATELIMIT_STATE_DIR", str(Path(workdir) / "state"))  # the driver's too
        r = traced_run(f"b{os.getpid()}", args.seconds, Path(workdir), links=args.links, settle_s=args.settle,
                       payload=args.payload, step_ms=args.step, **request)
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
