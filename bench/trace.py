"""Benchmark: links that follow a trace, at 100 to 10,000 links (``python -m bench trace``).

Every row uses ``traceload``'s topology (namespaces ``rltr-tb<pid>...``, 198.18.70.0/24 and
198.18.71.0/24 only): the router's egress towards the client carries ``links`` traced
links (a link per client port) following ``TRACE`` at ``scale``, each link at its own
phase, the driver (``ratelimit follow``) at ``step_ms``.

* **tracking**: each link is paced at 1.1 times its capacity by C senders, a packet
  socket records what arrives (``traceload.traced_run``); the bytes delivered per 1 s and
  per 100 ms window, windows at random offsets, against the trace's capacity in that
  window, in the bytes the class meters (``traceload.reference``).  A window's error
  counts in tolerances: 5% (1 s) or 10% (100 ms), or one datagram, whichever is larger;
  also in bytes.  Each size has its own scale and datagram size (``SIZES``): a link's 1 s
  window holds 50 datagrams or more at the trace's mean at 100 and 1,000 links, as many as
  this machine forwards beside the driver at 4,000 and 10,000.  Each row also says how
  late the senders were and what the receiver missed of what the classes sent.  The
  driver's CPU is its user + system time from ``/proc/PID/stat`` over the run.  The
  sampled rows (``SAMPLED``) have the driver follow 4,000 or 10,000 links and the senders
  load some of them with the 1,000-link row's small datagrams: the tracking at the driver's
  full size, 50 datagrams or more in each scored window.
* **driver alone**: the same links, no traffic, the driver at each of ``STEPS``: its CPU
  (``/proc/PID/stat``), the changes it sent a second and the steps it missed (their time
  had passed before it could send them: the step it cannot sustain).
* **beside**: 20,000 and 40,000 links on 8 tx queues, each sent its trace's mean, the
  driver's CPU beside the machine's softirq (``tracebusy``): which one limits the router.
* **naive**: no driver; a shell in the router's namespace runs one ``tc class change``
  process per link per step, as scripts do, with each link's rate of that step: how long
  a round of them takes (the shortest step it sustains) and its CPU.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from . import procfs, tracebusy
from .common import BenchError, delivered, say, Steps, wait_until
from .results import new_result, save

NAME = "trace"
VM_WORK = False
TRACE = "lte-drive.down"
QUEUE = "30280b"  # 20 full frames
# links, scale, UDP payload bytes.  A link's 1 s window holds, at the trace's mean (1.04 MB/s of
# frames at scale 1), 69 datagrams at 100 links, 52 at 1,000 (202-byte frames), 5.0 at 4,000 and 1.4
# at 10,000: about 7,000, 52,000, 21,000 and 14,000 a second delivered, 10% more sent.  52,000 a
# second is about what this machine forwards through 1,000 traced links at all (two C senders, each
# a core's kernel work: 66,000 a second planned went up to 0.7 s late); at 4,000 and 10,000 links
# the driver takes most of a core (37,000 a second planned at 4,000 links went up to 6 s late;
# 22,000 at 10,000 links, 15 s: measured)
SIZES = ((100, 0.1, 1472), (1000, 0.01, 160), (4000, 0.005, 1000), (10000, 0.002, 1472))
QUICK_SIZES = ((100, 0.1, 1472),)
STEPS = (50, 100, 200)
# links, scale, UDP payload bytes, step ms: tracking at other steps than 100 ms (the error each step
# gives at 1,000 links, and 10,000 links at 200 ms), and 1,000 links at 0.002 (as slow as the 10,000's)
OTHER_STEPS = ((1000, 0.01, 160, 50), (1000, 0.01, 160, 200), (10000, 0.002, 1472, 200), (1000, 0.002, 1472, 100))
# the tracking at 4,000 and 10,000 links with datagrams as small as the 1,000-link row's, 52 a link's 1 s
# window: the driver follows every link, the senders pace 500 (every 8th) and 200 (every 50th) of them,
# about 28,000 and 11,000 datagrams a second beside a driver taking 40% and 90% of a core (1,000 of the
# 10,000 loaded, 56,000 a second, fell up to 4.8 s behind: measured): links, scale, UDP payload bytes, loaded
SAMPLED = ((4000, 0.01, 160, 500), (10000, 0.01, 160, 200))
SECONDS, QUICK_SECONDS = 20.0, 8.0
SETTLE_S = 3.0  # each run's first seconds, not scored
ALONE_S = 8.0
REFERENCE_STEP_MS = 100  # the step the reference driver (``--reference``) is read at, beside the array driver's
# the driver alone at the router's scale: links, scale, tx queues (the layout that carries 40,000 busy
# links: docs/benchmarks.md, section 10), steps
SCALE_SIZES = ((20000, 0.002, 8, (100,)), (40000, 0.002, 8, (100, 200)))
BESIDE = ((20000, 0.002, 8), (40000, 0.002, 8))  # the driver beside the shaping's softirq (``tracebusy``)
NAIVE_LINKS, QUICK_NAIVE_LINKS = (100, 1000), (100,)
NAIVE_ROUNDS = 3
TCP_LINKS = 20  # at 0.1 of the trace: about 0.8 Mbit/s each


def _request(ns: dict, links: int, scale: float, queues: int = 1):
    from ratelimit import service

    from . import traceload
    return service.make_request(traceload.DEV, netns=ns["rtr"], hosts=traceload.CLIENT,
                                ports=f"{traceload.PORT0}-{traceload.PORT0 + links - 1}", direction="dest",
                                trace_down=TRACE, trace_scale=str(scale), queue=QUEUE, bandwidth="1gbit",
                                queues=str(queues))


def tracking(links: int, scale: float, payload: int, step_ms: int, seconds: float, loaded: int | None = None) -> dict:
    from . import traceload
    with tempfile.TemporaryDirectory() as work:  # scored where the senders were on plan, else BenchError
        r = traceload.on_plan_run(f"tb{os.getpid()}", seconds, Path(work), attempts=2, say=lambda m: say(NAME, m),
                                  links=links, payload=payload, step_ms=step_ms, settle_s=SETTLE_S, trace_down=TRACE,
                                  trace_scale=str(scale), queue=QUEUE, bandwidth="1gbit", loaded=loaded)
    d = r.pop("driver")
    frame = payload + 42
    span = seconds - 3.5
    return {"kind": "tracking", "links": links, "loaded": loaded or links, "scale": scale, "payload_bytes": payload,
            "step_ms": step_ms, **{k: round(v, 4) for k, v in r.items() if isinstance(v, float)},
            "datagrams_per_s": round(r["received"] / seconds),
            "datagrams_per_link_s": round(r["received"] / seconds / (loaded or links), 1),
            "mbit_s": round(r["received"] * frame * 8 / seconds / 1e6, 1),
            "driver_cpu": d.get("cpu_share"), "missed": d.get("missed"), "rounds": d.get("rounds"),
            "round_ms": d.get("round_ms"), "late_ms": d.get("late_ms"), "sender": r["sent"], "span_s": span,
            "datagrams_per_window": round(r["datagrams_per_window"], 1), "class_packets": r["class_packets"],
            "receiver_lost": r["receiver_lost"], "window_late_ms": r["window"]["late_ms"]}


def _scored(links: int, scale: float, payload: int, step_ms: int, seconds: float, loaded: int | None = None) -> dict:
    """``tracking``, or a row that says why it was not scored: where this machine's senders
    fall behind their plan in every attempt, the load is what failed, not the links."""
    try:
        return tracking(links, scale, payload, step_ms, seconds, loaded)
    except BenchError as e:
        say(NAME, f"not scored: {e}")
        return {"kind": "unscored", "links": links, "loaded": loaded or links, "scale": scale,
                "payload_bytes": payload, "step_ms": step_ms, "why": str(e)}


def driver_alone(links: int, scale: float, steps: tuple, seconds: float, queues: int = 1) -> list[dict]:
    """The driver with no traffic, at each of ``steps``: the array driver, then (at 100 ms)
    the reference (``ratelimit follow --reference``), one after the other on the same plan."""
    from ratelimit.driver import follow
    from ratelimit import service

    from . import traceload
    tag = f"tb{os.getpid()}a"
    rows = []
    ns = traceload.topology(tag, queues)
    try:
        service.apply(_request(ns, links, scale, queues), follow=False)
        runs = [(step, False) for step in steps] + [(REFERENCE_STEP_MS, True)] * (REFERENCE_STEP_MS in steps)
        for step, reference in runs:
            pid = follow.start(ns["rtr"], traceload.DEV, step, reference)
            # the window starts once the driver has made 2 s of rounds (its first, every link's
            # class and gate, and its lead's first adjustments), counted in its rounds, not the clock
            warm = round(2000 / step)
            # (its own status: the driver before it left its last one, rounds and all, in the same file)
            wait_until(lambda: (st := follow.read_status(ns["rtr"], traceload.DEV) or {}).get("pid") == pid and
                       st.get("rounds", 0) >= warm,
                       240, f"the driver's first {warm} rounds at {step} ms", every_s=0.1,
                       detail=lambda: f"status {follow.read_status(ns['rtr'], traceload.DEV)}")
            s0, (u0, k0), t0 = follow.read_status(ns["rtr"], traceload.DEV), procfs.times_s(pid)[:2], \
                time.monotonic()
            time.sleep(seconds)  # the window
            s1, (u1, k1), t1 = follow.read_status(ns["rtr"], traceload.DEV), procfs.times_s(pid)[:2], \
                time.monotonic()
            follow.stop(ns["rtr"], traceload.DEV)
            span = t1 - t0
            cpu, changes = (u1 + k1 - u0 - k0) / span, (s1["sent"] - s0["sent"]) / span
            rows.append({"kind": "driver", "links": links, "scale": scale, "step_ms": step, "queues": queues,
                         "stepper": s1.get("stepper", "arrays"),
                         "cpu": round(cpu, 4), "user": round((u1 - u0) / span, 4),
                         "system": round((k1 - k0) / span, 4), "changes_per_s": round(changes),
                         "us_per_change": round(cpu / changes * 1e6, 3) if changes else None,
                         "rounds_per_s": round((s1["rounds"] - s0["rounds"]) / span, 2),
                         "missed_per_s": round((s1["missed"] - s0["missed"]) / span, 2),
                         "round_ms": s1.get("round_ms")})
    finally:
        try:
            service.clean(traceload.DEV, ns["rtr"])
        finally:
            traceload.cleanup(tag)
    return rows


def naive(links: int, scale: float, step_ms: int, rounds: int) -> dict:
    """One ``tc class change`` process per link per step (a shell loop in the router's
    namespace), ``rounds`` steps back to back: how long each round takes."""
    from ratelimit import service
    from ratelimit.state import records
    from ratelimit.profiles.traced import load_all
    from ratelimit.plan.compile import compile_plan
    from ratelimit.driver.steps import traced_links

    from . import traceload
    tag = f"tb{os.getpid()}n"
    with tempfile.TemporaryDirectory() as work:
        ns = traceload.topology(tag)
        try:
            service.apply(_request(ns, links, scale), follow=False)
            req = records.load(ns["rtr"], traceload.DEV).request
            loaded = load_all(req)
            traced = traced_links(compile_plan(req), loaded)
            script = []
            for k in range(rounds):
                script.append("date +%s%N")
                for link in traced:
                    c = link.klass_at(max(8, link.window_bps(k * step_ms, (k + 1) * step_ms)))
                    script.append("tc " + c.tc().replace("class add ", "class change ", 1))
            script += ["date +%s%N", "times"]  # the shell's children's CPU: not this process's, whose
            # children include drivers of earlier rows reaped at any later moment
            path = Path(work) / "naive.sh"
            path.write_text("\n".join(script) + "\n")
            out = subprocess.run(["ip", "netns", "exec", ns["rtr"], "sh", "-e", str(path)], check=True,
                                 capture_output=True, text=True).stdout.splitlines()
            stamps = [int(x) / 1e6 for x in out[:-2]]
            took = [b - a for a, b in zip(stamps, stamps[1:])]
            cpu = sum(_seconds(t) for t in out[-1].split()) / ((stamps[-1] - stamps[0]) / 1000)
            return {"kind": "naive", "links": links, "scale": scale, "round_ms": round(sorted(took)[len(took) // 2], 1),
                    "rounds": len(took), "cpu": round(cpu, 3),
                    "per_change_ms": round(sum(took) / len(took) / links, 3)}
        finally:
            try:
                service.clean(traceload.DEV, ns["rtr"])
            finally:
                traceload.cleanup(tag)


def _seconds(text: str) -> float:
    """A time as the shell's ``times`` prints it: ``1m2.345s``."""
    minutes, _, seconds = text.rstrip("s").partition("m")
    return int(minutes) * 60 + float(seconds)


TCP_SERVER = r"""
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(4096)
print("ready", flush=True)
data = bytes(1 << 16)
def feed(c):
    try:
        while True:
            c.sendall(data)
    except OSError:
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=feed, args=(c,), daemon=True).start()
"""

# reads until its standard input ends (the benchmark closes it after its second reading), or
# after ``seconds`` at the most
TCP_CLIENT = r"""
import selectors, socket, sys, time
server, port0, links, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sel = selectors.DefaultSelector()
for i in range(links):
    c = socket.socket(); c.bind((sys.argv[5], port0 + i)); c.connect((server, 5001)); c.setblocking(False)
    sel.register(c, selectors.EVENT_READ)
sel.register(sys.stdin, selectors.EVENT_READ)
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    for key, _ in sel.select(0.05):
        if key.fileobj is sys.stdin:
            if not sys.stdin.buffer.read1(1 << 16):
                sys.exit(0)
            continue
        try:
            key.fileobj.recv(1 << 16)
        except BlockingIOError:
            pass
"""


def _delivered_at(netns: str) -> tuple[float, dict]:
    """The server's ``delivered`` counts (``common.delivered``) and when they were read
    (wall clock, ms: the middle of the read)."""
    t = time.time()
    counts = delivered(netns)
    return (t + time.time()) * 500, counts


def tcp(links: int, scale: float, seconds: float) -> dict:
    """A TCP download (cubic, the kernel's default here) over each of ``links`` traced links
    for ``seconds``: the segments each connection had delivered from ``SETTLE_S`` on
    (the server's count, ``common.delivered``: a segment counts once it reaches the client,
    in order or not, and once however often it was sent) against the trace's capacity over
    the same time, each opportunity one full-size segment (a 1,500-byte IP packet with TCP
    timestamps, 1,448 bytes of payload).  Not the client's reads: a lost segment holds
    every segment after it from the reader until its retransmission arrives, so the reads
    over a window also count what crossed the link before it (up to 17.5% more than crossed
    in a link's 5 s window, measured: docs/benchmarks.md)."""
    from ratelimit.driver import follow
    from ratelimit import service
    from ratelimit.state import records
    from ratelimit.profiles.traced import load_all
    from ratelimit.plan.compile import compile_plan
    from ratelimit.driver.steps import traced_links

    from . import traceload
    tag = f"tb{os.getpid()}t"
    ns = traceload.topology(tag)
    server = client = None
    try:
        service.apply(_request(ns, links, scale), follow=False)
        pid = follow.start(ns["rtr"], traceload.DEV, 100)
        req = records.load(ns["rtr"], traceload.DEV).request
        started = req.cohorts[0].trace.started_ms
        loaded = load_all(req)
        traced = {link.port: link for link in traced_links(compile_plan(req), loaded)}
        server = traceload._python(ns["srv"], TCP_SERVER, traceload.SERVER, stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        c0, t0 = procfs.cpu_s(pid, children=False), time.monotonic()
        # the client reads until the second reading is done (its stdin closes then), so every
        # link is still busy at both
        client = traceload._python(ns["cli"], TCP_CLIENT, traceload.SERVER, str(traceload.PORT0), str(links),
                                   str(seconds + 120), traceload.CLIENT, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        if client.stdout.readline().strip() != "ready":  # every link's connection made
            raise BenchError(f"the TCP client ended before its {links} connections were made")
        connected = time.time()
        time.sleep(max(0.0, connected + SETTLE_S - time.time()))  # TCP's start on the links: their time
        start_ms, before = _delivered_at(ns["srv"])
        time.sleep(max(0.0, connected + seconds - time.time()))  # the window
        end_ms, after = _delivered_at(ns["srv"])
        cpu = (procfs.cpu_s(pid, children=False) - c0) / (time.monotonic() - t0)
        client.communicate(timeout=60)
        ratios = []
        for port, link in sorted(traced.items()):
            key = (traceload.CLIENT, port)
            if key not in before or key not in after:
                raise BenchError(f"the TCP download to port {port} was not established at both readings")
            a, b = start_ms - started - link.offset_ms, end_ms - started - link.offset_ms
            ratios.append((after[key] - before[key]) / (link.capacity.opportunities(a, b) * link.capacity.scale))
        ratios.sort()
        return {"kind": "tcp", "links": links, "scale": scale, "seconds": seconds,
                "window_s": round((end_ms - start_ms) / 1000, 3),
                "goodput_ratio_mean": round(sum(ratios) / len(ratios), 4), "goodput_ratio_min": round(ratios[0], 4),
                "goodput_ratio_max": round(ratios[-1], 4), "driver_cpu": round(cpu, 4)}
    finally:
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        try:
            service.clean(traceload.DEV, ns["rtr"])
        finally:
            traceload.cleanup(tag)


def measure(quick: bool) -> dict:
    sizes = QUICK_SIZES if quick else SIZES
    naive_links = QUICK_NAIVE_LINKS if quick else NAIVE_LINKS
    seconds = QUICK_SECONDS if quick else SECONDS
    steps = (100,) if quick else STEPS
    other = () if quick else OTHER_STEPS
    sampled = () if quick else SAMPLED
    scale_sizes, beside = ((), ()) if quick else (SCALE_SIZES, BESIDE)
    doc = new_result(NAME, quick)
    alone_s = 4.0 if quick else ALONE_S
    doc["config"] = {"trace": TRACE, "queue": QUEUE, "seconds": seconds, "settle_s": SETTLE_S, "alone_s": alone_s,
                     "scale_sizes": [[*x[:3], list(x[3])] for x in scale_sizes], "beside": [list(x) for x in beside],
                     "steps_ms": list(steps), "other_steps": [list(x) for x in other],
                     "sampled": [list(x) for x in sampled], "naive_rounds": NAIVE_ROUNDS}
    step = Steps(NAME, 2 * len(sizes) + len(scale_sizes) + len(beside) + len(other) + len(sampled) + len(naive_links)
                 + 1)
    saved = os.environ.get("RATELIMIT_STATE_DIR")
    state_dir = tempfile.TemporaryDirectory()
    os.environ["RATELIMIT_STATE_DIR"] = state_dir.name  # records and drivers' status of our own
    try:
        for links, scale, payload in sizes:
            step(f"{links} links tracking {TRACE} x {scale}, {payload}-byte datagrams, a 100 ms step")
            doc["rows"].append(_scored(links, scale, payload, 100, seconds))
            say(NAME, str(doc["rows"][-1]))
            step(f"{links} links: the driver alone at steps of {', '.join(map(str, steps))} ms")
            doc["rows"] += driver_alone(links, scale, steps, alone_s)
            say(NAME, str(doc["rows"][-len(steps) - 1:]))
        for links, scale, queues, at in scale_sizes:
            step(f"{links} links on {queues} tx queues: the driver alone at steps of {', '.join(map(str, at))} ms")
            doc["rows"] += driver_alone(links, scale, at, alone_s, queues)
            say(NAME, str(doc["rows"][-len(at) - 1:]))
        for links, scale, queues in beside:
            step(f"{links} links on {queues} tx queues, each sent its trace's mean: the driver beside the shaping")
            doc["rows"].append(tracebusy.measure_row(links, queues, scale, TRACE, QUEUE))
            say(NAME, str(doc["rows"][-1]))
        for links, scale, payload, step_ms in other:
            step(f"{links} links tracking {TRACE} x {scale}, {payload}-byte datagrams, a {step_ms} ms step")
            doc["rows"].append(_scored(links, scale, payload, step_ms, seconds))
            say(NAME, str(doc["rows"][-1]))
        for links, scale, payload, loaded in sampled:
            step(f"{links} links tracking {TRACE} x {scale}, {loaded} of them loaded with {payload}-byte datagrams, "
                 f"a 100 ms step")
            doc["rows"].append(_scored(links, scale, payload, 100, seconds, loaded))
            say(NAME, str(doc["rows"][-1]))
        for links in naive_links:
            scale = next(s for n, s, _ in SIZES if n == links)
            step(f"{links} links: the naive driver (a tc process per link per step)")
            doc["rows"].append(naive(links, scale, 100, NAIVE_ROUNDS))
            say(NAME, str(doc["rows"][-1]))
        step(f"{TCP_LINKS} links: a TCP download over each")
        doc["rows"].append(tcp(TCP_LINKS, 0.1, seconds))
        say(NAME, str(doc["rows"][-1]))
    finally:
        state_dir.cleanup()
        if saved is None:
            os.environ.pop("RATELIMIT_STATE_DIR", None)
        else:
            os.environ["RATELIMIT_STATE_DIR"] = saved
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    doc = measure(args.quick)
    say(NAME, f"wrote {save(doc, args.out or RESULTS_DIR)}")
    return 0
