"""Paced UDP load through traced links, scored against the capacity the links follow.  Root only.

The topology is ``tracefacts.topology``'s in namespaces ``rltr-TAG-s``, ``-r``, ``-c``
(removed by ``cleanup(tag)``): a server namespace sends, the router forwards and shapes its
egress towards the client (``rltr-c``: the traced links, ``--direction dest``, a link per
client port), the client namespace receives.  Addresses in 198.18.70.0/24 (client side)
and 198.18.71.0/24 (server side) only.

* The senders (in the server namespace; ``tracesend.c``, compiled on first use like
  ``blast.c``): link ``i`` (client port ``PORT0 + i``) is sent datagrams of ``payload``
  bytes paced at ``factor`` times its capacity (the same ``capacity`` model the driver
  follows, from the plan's start and the link's phase, averaged over ``SLICE_MS``), after a
  first burst that fills its queue.  Python works out every datagram's time (``schedule``)
  and hands each of ``SENDERS`` C processes its share of the links as a binary plan; each
  sleeps until a datagram is due and sends what is due with ``sendmmsg``.  Two, because the
  kernel forwards each datagram (veth, the router's qdiscs, the client) in the sending
  process's time: one core carries about 45,000 a second through 1,000 traced links.
* The receiver (in the client namespace; ``tracerecv.c``): a packet socket with a receive
  ring (the kernel wakes it once a block of packets is full, not once a packet) on the
  client's device records every UDP datagram with the kernel's receive time (wall clock):
  (time, port, IP length) records in a file.  The client then drops the datagrams
  (``sink``: netfilter, after the socket has seen them), sparing the kernel a UDP lookup and
  a port-unreachable each.  It stops once the links' queues have emptied (``drained``); the
  links' classes' packet counters just before are what it should have recorded
  (``receiver_lost``).
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
from bisect import bisect_left, bisect_right
from pathlib import Path

from ratelimit import SOURCE_ROOT

from . import procfs, tracefacts

PORT0 = 20000
CLIENT, SERVER = "198.18.70.2", "198.18.71.2"  # bench.tracefacts' topology
DEV, CLIENT_DEV, ETH_HEADER_BYTES = "rltr-c", "rltr-c0", 14
SLICE_MS = 20  # the sender paces each link at its capacity averaged over slices this long
PREFILL_MS = 1000  # each link's first datagrams (``prefill``) go out over the plan's first second
SENDERS = min(2, len(os.sched_getaffinity(0)))  # sender processes: at most one per CPU this process may use
DRAIN_S = 15.0  # the most the receiver waits, after the sender, for the links' queues to empty
# a datagram sent this late or later: its sender was behind its plan, and what its link
# delivered then measures the load, not the link (a link's queue holds about 200 ms of its
# datagrams at the square wave's high rate, 4 frames at 20.75 a second)
BEHIND_MS = 100.0


def names(tag: str) -> dict:
    return {"cli": f"rltr-{tag}-c", "rtr": f"rltr-{tag}-r", "srv": f"rltr-{tag}-s"}


def cleanup(tag: str) -> None:
    from ratelimit.kernel.netns import delete_namespaces
    delete_namespaces(list(names(tag).values()))


def topology(tag: str, queues: int = 1) -> dict:
    """Server -- router -- client (``tracefacts.topology``); returns the namespaces' names."""
    ns = names(tag)
    tracefacts.topology(ns, queues)
    # no port-unreachable replies from the client for the datagrams nobody reads: destination
    # unreachable (type 3, bit 3 of the mask) limited to one per 1,000 s per peer (a mask of 0
    # limits no type: every datagram had its reply, as many packets again back through the router)
    tracefacts.sh("sysctl", "-qw", "net.ipv4.icmp_ratelimit=1000000", "net.ipv4.icmp_ratemask=8", ns=ns["cli"])
    return ns


def _python(netns: str, code: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH"))
                                                       if p))
    return subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", code, *args], env=env, **kw)


# ---------------------------------------------------------------- the sender and the receiver

SENDER, RECEIVER = (Path(__file__).with_name(n) for n in ("tracesend.c", "tracerecv.c"))  # compiled on first use


def _compiled(source: Path) -> str:
    from . import blast
    from .common import BenchError
    exe = blast.compiled(source)
    if exe is None:
        raise BenchError(f"{source.name}: no C compiler (apt-get install gcc)")
    return exe


def _paced(link, begin: float, end: float, first: float, per_frame: float, out: list) -> None:
    """``link``'s datagrams over [begin, end) of the plan's time, (time, port) into ``out``:
    where its paced cumulative (``per_frame`` datagrams a byte of capacity, each
    ``SLICE_MS`` slice at that slice's average) crosses a whole one, from ``first``."""
    due, t = first, begin
    while t < end:
        got = reference(link, t - link.offset_ms, t + SLICE_MS - link.offset_ms) * per_frame
        while due <= got:
            out.append((t + SLICE_MS * due / got, link.port))
            due += 1
        due -= got
        t += SLICE_MS


def schedule(links: list, started_ms: int, seconds: float, *, frame_bytes: int, factor: float,
             prefill: int) -> tuple[array, array, float]:
    """Each link's first ``prefill`` datagrams spread over the plan's first ``PREFILL_MS``, and
    its datagrams paced at ``factor`` times its capacity (``_paced``) for ``seconds``, from a
    time far enough ahead to work them all out (twice what the first few links took, and
    2 s): the send times (wall clock, ms) in order, their ports, the end.  The prefill keeps
    a link backlogged from its first datagram: paced alone it would have one datagram
    queued only once a tenth of its capacity (at 1.1) had added up to one, some 14 s of a
    link at 0.001 of the LTE drive, which would idle between its frames until then."""
    per_frame, sample = factor / frame_bytes, links[:20]
    t0 = time.perf_counter()
    for link in sample:
        _paced(link, 0, seconds * 1000, 0, per_frame, [])
    lead_ms = 2000 + 2 * (time.perf_counter() - t0) * 1000 * len(links) / max(1, len(sample))
    begin = time.time() * 1000 - started_ms + lead_ms  # ms of the plan's time
    end = begin + seconds * 1000
    plan: list = []
    for i, link in enumerate(links):
        plan += [(begin + PREFILL_MS * (k + i / len(links)) / prefill, link.port) for k in range(prefill)]
        _paced(link, begin, end, i / len(links), per_frame, plan)
    plan.sort()
    return array("d", (t + started_ms for t, _ in plan)), array("i", (p for _, p in plan)), end + started_ms


def write_plan(path: Path, times: array, ports: array) -> None:
    """The plan as ``tracesend.c`` reads it: a count and the times, a count and the ports."""
    with open(path, "wb") as f:
        for a in (times, ports):
            f.write(struct.pack("=q", len(a)))
            a.tofile(f)


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
                     prefill: int, ports: set | None = None) -> tuple[dict, tuple]:
    """Pace every traced link of ``req`` (its record's request, started at ``started_ms``;
    ``ports``: only the links to these client ports) for ``seconds``; returns the senders'
    counts (with the receiver's, ``receiver``; whether the queues had emptied before it
    stopped, ``drained``; the packets the links' classes had sent, ``class_packets``,
    just before it was told to stop and after it stopped; and ``lateness``: every
    datagram's due time, wall clock ms, and how late it went, in due order, two arrays
    that ``on_plan`` reads and ``traced_run`` leaves out of its result) and the receiver's
    records."""
    from ratelimit.profiles.traced import load_all
    from ratelimit.plan.compile import compile_plan
    from ratelimit.driver.steps import traced_links
    sender_exe, receiver_exe = _compiled(SENDER), _compiled(RECEIVER)
    srcs = load_all(req)
    links = [link for link in traced_links(compile_plan(req), srcs)
             if link.direction == "dest" and (ports is None or link.port in ports)]
    out, senders = workdir / "received.bin", []
    Path(str(out) + ".stop").unlink(missing_ok=True)  # an earlier run's word to stop, in the same directory
    receiver = subprocess.Popen(["ip", "netns", "exec", ns["cli"], receiver_exe, CLIENT_DEV, str(seconds + 300),
                                 str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready", receiver.stderr.read()
        times, ports, end_ms = schedule(links, started_ms, seconds, frame_bytes=payload + 28 + ETH_HEADER_BYTES,
                                        factor=factor, prefill=prefill)
        if times and times[0] < time.time() * 1000:
            raise RuntimeError(f"the plan took too long to work out: its first datagram was due "
                               f"{time.time() * 1000 - times[0]:.0f} ms ago")
        sink(ns, True)
        dues = []
        for k in range(SENDERS):  # each its share of the links (ports), so the kernel's work is on every core
            mine = [j for j, p in enumerate(ports) if p % SENDERS == k]
            path = workdir / f"plan{k}.bin"
            dues.append(array("d", (times[j] for j in mine)))
            write_plan(path, dues[-1], array("i", (ports[j] for j in mine)))
            senders.append(subprocess.Popen(["ip", "netns", "exec", ns["srv"], sender_exe, CLIENT, str(payload),
                                             str(path), str(workdir / f"late{k}.bin")], stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True))
        counts = []
        for sender in senders:
            sout, serr = sender.communicate(timeout=seconds + 240)
            if sender.returncode != 0:
                raise RuntimeError(f"sender failed: {serr.strip()[-500:]}")
            counts.append(json.loads(sout))
        empty = drained(ns, DRAIN_S)  # the last datagrams through their queues
        before = class_packets(ns, [link.port for link in links])
        Path(str(out) + ".stop").touch()
        rout, rerr = receiver.communicate(timeout=30)
        after = class_packets(ns, [link.port for link in links])
        if receiver.returncode != 0:
            raise RuntimeError(f"receiver failed: {rerr.strip()[-500:]}")
    finally:
        for p in (receiver, *senders):
            if p.poll() is None:
                p.kill()
                p.wait()
        sink(ns, False)
    sent = {"sent": sum(c["sent"] for c in counts), "errors": sum(c["errors"] for c in counts),
            "cpu_s": round(sum(c["cpu_s"] for c in counts), 2), "late_ms": max(c["late_ms"] for c in counts),
            "late_10ms": sum(c["late_10ms"] for c in counts), "senders": len(counts), "end_ms": end_ms,
            "receiver": json.loads(rout.strip().splitlines()[-1]), "drained": empty,
            "class_packets": (before, after),
            "lateness": _lateness(dues, [workdir / f"late{k}.bin" for k in range(len(dues))])}
    return sent, read_records(out)


def _lateness(dues: list, paths: list) -> tuple[array, array]:
    """The senders' datagrams' due times (wall clock, ms) and how late each went (ms, the
    senders' ``LATE_FILE``s), all senders together in due order."""
    rows = []
    for due, path in zip(dues, paths):
        with open(path, "rb") as f:
            n = struct.unpack("=q", f.read(8))[0]
            late = array("f")
            late.fromfile(f, n)
        rows.extend(zip(due, late))
    rows.sort()
    return array("d", (d for d, _ in rows)), array("f", (x for _, x in rows))


def on_plan(lateness: tuple, earliest_ms: float, latest_ms: float, length_ms: float, started_ms: int,
            step_ms: int) -> dict:
    """The scoring window: ``length_ms`` long, from ``earliest_ms`` or, if the senders were
    behind (a datagram due then went ``BEHIND_MS`` late or more) in or just before it, from the
    first of the plan's steps (every ``step_ms`` from ``started_ms``) one step after they were
    back on plan, ending by ``latest_ms`` (wall clock, ms).  Returns ``start_ms``, ``end_ms``,
    the window's ``late_ms`` (the most a datagram due in it went late) and ``behind``: None, or
    one line saying when the senders were behind and how far, when no window fits."""
    due, late = lateness
    spans: list = []  # when the senders were behind: [due, sent] of each datagram that late, merged
    for d, x in zip(due, late):
        if x >= BEHIND_MS:
            if spans and d <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], d + x)
            else:
                spans.append([d, d + x])
    a = earliest_ms
    # when the senders were behind, in s from the earliest start (the first 20)
    behind_at = [[round((x - earliest_ms) / 1000, 2), round((y - earliest_ms) / 1000, 2)] for x, y in spans[:20]]
    while True:
        hit = [sp for sp in spans if sp[0] < a + length_ms and sp[1] > a - step_ms]
        if not hit:
            i, j = bisect_left(due, a), bisect_left(due, a + length_ms)
            return {"start_ms": a, "end_ms": a + length_ms, "late_ms": round(max(late[i:j], default=0.0), 1),
                    "behind": None, "behind_at_s": behind_at}
        back = max(sp[1] for sp in hit) + step_ms  # on plan again, and a step for the queues to refill
        a = started_ms + -(-(back - started_ms) // step_ms) * step_ms
        if a + length_ms > latest_ms:
            worst = max(hit, key=lambda sp: sp[1] - sp[0])
            i, j = bisect_left(due, worst[0]), bisect_right(due, worst[1])
            return {"start_ms": None, "end_ms": None, "late_ms": round(max(late[i:j], default=0.0), 1),
                    "behind": f"the senders fell behind their plan (the load, not the links): up to "
                              f"{max(late[i:j], default=0.0):.0f} ms late {(worst[0] - earliest_ms) / 1000:+.1f} s "
                              f"into the scoring window, and no {length_ms / 1000:.1f} s window on plan fits in the "
                              f"run (behind by {BEHIND_MS:g} ms or more at "
                              f"{', '.join(f'{x:+.1f}' for x, _ in behind_at[:6])}{' ...' if len(spans) > 6 else ''} s)",
                    "behind_at_s": behind_at}


def sink(ns: dict, on: bool) -> None:
    """The client drops the datagrams to ports from ``PORT0`` as they arrive (netfilter, after the
    receiver's packet socket has seen them): no UDP lookup and no port-unreachable for each,
    work the kernel would do in the senders' time.  ``on=False``: removed."""
    rule = ["PREROUTING", "-i", CLIENT_DEV, "-p", "udp", "--dport", f"{PORT0}:65535", "-j", "DROP"]
    r = subprocess.run(["ip", "netns", "exec", ns["cli"], "iptables", "-t", "raw", "-A" if on else "-D", *rule],
                       capture_output=True, text=True, check=False)
    if on and r.returncode != 0:
        raise RuntimeError(f"iptables in {ns['cli']}: {r.stderr.strip()}")


def drained(ns: dict, most_s: float) -> bool:
    """Wait (at least 1.5 s, at most ``most_s``) until the links' queues are empty."""
    from ratelimit.service import readout
    time.sleep(1.5)  # after the measurement: the last datagrams are through before an empty queue counts
    stop = time.monotonic() + most_s - 1.5
    while time.monotonic() < stop:
        if not sum(readout.counters(DEV, ns["rtr"]).counters["backlog_pkts"]):
            return True
        time.sleep(0.25)
    return False


def class_packets(ns: dict, ports: list[int]) -> int:
    """The packets the classes of the links to ``ports`` sent (their counters), in all."""
    from ratelimit.service import readout
    data = readout.counters(DEV, ns["rtr"])
    wanted = set(ports)
    return sum(int(n) for key, n in zip(data.keys, data.counters["packets"])
               if key[0] == "dest" and key[2] in wanted)


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
    from ratelimit.traces.capacity import FULL_IP_BYTES, TraceCapacity, metered_bytes
    c = link.capacity
    if isinstance(c, TraceCapacity):
        return c.opportunities(t0_ms, t1_ms) * c.scale * metered_bytes(FULL_IP_BYTES, link.layer)
    return c.bytes(t0_ms, t1_ms)


def score(records: tuple, links: list, started_ms: int, t0_ms: float, t1_ms: float, frame_bytes: int,
          windows=((1000, 0.02, 20), (100, 0.10, 60)), seed: int = 1) -> dict:
    """The delivered bytes against the capacity (``link.capacity`` in the plan's time,
    from ``started_ms``) over [t0, t1) (wall clock, ms): the mean over all links, and per
    window length (ms, tolerance, windows per link) the p95 of each window's relative error,
    of its error in tolerances (the tolerance, or one datagram, whichever is larger) and of
    its error in bytes."""
    rng = random.Random(seed)
    rows = per_link(records, [link.port for link in links])
    total_got = total_cap = 0.0
    out = {}
    errs: dict = {w: ([], [], []) for w, _, _ in windows}
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
                errs[w][2].append(abs(g - c))
    out["mean_ratio"] = total_got / total_cap
    for w, tol, _ in windows:
        rel, tols, nbytes = (sorted(x) for x in errs[w])
        out[f"p95_error_{w}ms"] = rel[int(0.95 * (len(rel) - 1))]
        out[f"p95_tolerances_{w}ms"] = tols[int(0.95 * (len(tols) - 1))]
        out[f"worst_tolerances_{w}ms"] = tols[-1]
        out[f"p95_error_bytes_{w}ms"] = nbytes[int(0.95 * (len(nbytes) - 1))]
    return out


def traced_run(tag: str, seconds: float, workdir: Path, *, links: int, payload: int = 1472,
               factor: float = 1.1, prefill: int = 4, settle_s: float = 3.0, step_ms: int | None = None,
               loaded: int | None = None, slack_s: float = 0.0, **request) -> dict:
    """Apply ``links`` traced links (a link per client port, ``--direction dest``; ``request``:
    the rest of ``service.make_request``'s options, a ``schedule`` or ``trace_down`` among
    them; the driver started after the apply, at ``step_ms``), pace each at ``factor`` times its capacity for
    ``seconds``, remove it all; the score over the run less its first ``settle_s`` and last
    half second (``score``), the sender's counts and the driver's last status.  ``loaded``:
    pace and score only that many of the links, spread evenly over them (every k-th port), while
    the driver follows them all: the tracking at a driver's scale with a load the machine carries.

    The window is scored only where the senders were on their plan (``on_plan``): where they
    fell behind, the links were short of datagrams and the score would be the load's.  With
    ``slack_s`` the senders run that much longer and the window, as long as without it, may
    start that much later, at the first step after they are back on plan.  ``window`` says
    where it was; its ``behind`` is None, or why no window was scored (the score is then
    that of the window without slack, for the record only: ``on_plan_run`` raises)."""
    from ratelimit.driver import follow
    from ratelimit import service
    from ratelimit.state import records as state
    from ratelimit.profiles.traced import load_all
    from ratelimit.plan.compile import compile_plan
    from ratelimit.driver.steps import traced_links
    ns = topology(tag)
    try:
        req = service.make_request(DEV, netns=ns["rtr"], hosts=CLIENT, ports=f"{PORT0}-{PORT0 + links - 1}",
                                   direction="dest", **request)
        service.apply(req, follow=False)
        pid = follow.start(ns["rtr"], DEV, step_ms)
        req = state.load(ns["rtr"], DEV).request
        started = req.cohorts[0].trace.started_ms
        srcs = load_all(req)
        traced = [link for link in traced_links(compile_plan(req), srcs) if link.direction == "dest"]
        if loaded is not None:
            traced = traced[::max(1, len(traced) // loaded)][:loaded]
        cpu0, t0 = procfs.cpu_s(pid, children=False), time.monotonic()
        sent, records = send_and_receive(ns, req, started, seconds + slack_s, workdir, payload=payload,
                                         factor=factor, prefill=prefill, ports={link.port for link in traced})
        driver = follow.read_status(ns["rtr"], DEV)
        driver["cpu_share"] = round((procfs.cpu_s(pid, children=False) - cpu0) / (time.monotonic() - t0), 4)  # of one core
        if not records[0]:
            from .common import BenchError
            raise BenchError(f"the receiver recorded none of the {sent['sent']} datagrams sent "
                             f"(its own count: {sent['receiver']})")
        first, last = records[0][0] / 1e6, records[0][-1] / 1e6  # the receiver runs on after the sender's end
        # the window without slack, as it always was: from the first arrival + settle_s to the
        # plan's end less half a second
        begun_ms = sent["end_ms"] - (seconds + slack_s) * 1000
        a, b = first + settle_s * 1000, min(last, begun_ms + seconds * 1000) - 500
        window = on_plan(sent.pop("lateness"), a, min(last, sent["end_ms"]) - 500, b - a, started,
                         driver.get("step_ms") or step_ms or 100)
        if window["behind"] is None:
            a, b = window["start_ms"], window["end_ms"]
        window["settled_s"] = round((a - first) / 1000, 2)  # from the first arrival to the window's start
        result = score(records, traced, started, a, b, payload + 28 + ETH_HEADER_BYTES)
        ports = {link.port for link in traced}
        mean_bytes_s = sum(reference(link, 0, 60_000) for link in traced) / 60 / len(traced)  # over a minute
        result["datagrams_per_window"] = mean_bytes_s / max(64, payload + 28 + ETH_HEADER_BYTES)
        got = sum(1 for p in records[1] if p in ports)
        before, after = sent["class_packets"]
        # what the classes had sent before the receiver was told to stop and it did not record
        return {**result, "sent": sent, "received": len(records[0]), "driver": driver, "class_packets": after,
                "received_on_links": got, "receiver_lost": max(0, before - got), "window": window}
    finally:
        try:
            service.clean(DEV, ns["rtr"])
        finally:
            cleanup(tag)


def on_plan_run(tag: str, seconds: float, workdir: Path, *, attempts: int = 2, say=None, **kw) -> dict:
    """``traced_run`` until one scores a window where the senders were on their plan, at most
    ``attempts`` runs (tags ``tag``, ``tag``r1, ...); ``BenchError`` with the last run's
    reason when none did: a window the load fell behind in says nothing of the links, and
    no link is passed or failed on it."""
    from .common import BenchError
    for n in range(attempts):
        work = workdir if n == 0 else workdir / f"run{n + 1}"
        work.mkdir(exist_ok=True)
        r = traced_run(tag if n == 0 else f"{tag}r{n}", seconds, work, **kw)
        why = r["window"]["behind"]
        if why is None:
            r["window"]["runs"] = n + 1
            return r
        if say is not None:
            say(f"run {n + 1} of {attempts}: {why}")
    raise BenchError(f"{why}; in each of {attempts} runs")


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
    p.add_argument("--loaded", type=int, default=None, help="pace and score only this many of the links")
    args = p.parse_args(argv)
    request = {k: v for k, v in vars(args).items() if k in ("schedule", "trace_down", "trace_scale", "phase",
                                                            "phase_seed", "queue", "bandwidth") and v is not None}
    with tempfile.TemporaryDirectory() as workdir:
        os.environ.setdefault("RATELIMIT_STATE_DIR", str(Path(workdir) / "state"))  # the driver's too
        r = traced_run(f"b{os.getpid()}", args.seconds, Path(workdir), links=args.links, settle_s=args.settle,
                       payload=args.payload, step_ms=args.step, loaded=args.loaded, **request)
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
