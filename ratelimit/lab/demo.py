"""``ratelimit lab demo``: the first command to run -- the 10,000-byte download of the
2000 experiments through an emulated 28.8k modem, timed and set against the link's model
and against what real modems moved."""

from __future__ import annotations

import shlex
import time
from dataclasses import replace

from ..kernel.probe import probe
from ..kernel.vm import in_vm
from ..profiles import catalog
from . import docroot, servertcp
from .core import Lab
from .link import LinkSpec
from .measure import download_argv
from .provision import LabError
from .store import DEFAULT_NAME
from .vmrun import run_in_vm, say

DEMO_NAME = "demo"
DEMO_PROFILE = "modem-28k8"
DEMO_PORTS = "10000-10099"
CONTROL_FRAMES_BYTES = 64  # the SYN-ACK's and a few bare ACKs' frames, next to the response


def demo(args) -> int:
    servertcp.check(args.server_tcp)  # a bad value is one line before anything is printed or booted
    if args.vm and not in_vm():
        return run_in_vm(["demo", "--name", args.name, "--server-tcp", args.server_tcp])
    t_start = time.monotonic()
    prof = catalog.load(DEMO_PROFILE)
    rate = prof.down.rate_bps
    size = docroot.EXPERIMENT_BYTES
    netem = probe(["netem"])["netem"]
    print(f"ratelimit lab demo: one client downloads the {size:,}-byte file of the 2000 experiments "
          f"through a router that emulates a {rate / 1000:g} kbit/s modem ({DEMO_PROFILE}: "
          f"{prof.link.name} framing, {prof.down.delay_us // 1000} ms each way, shaped per host).")
    if not netem:
        print(f"note: this kernel lacks netem (module sch_netem), so the modem's "
              f"{prof.down.delay_us // 1000} ms delay each way is left out; the rate and framing are emulated "
              f"in full. `ratelimit lab demo --vm` runs the whole profile in a full-kernel VM (a minute or "
              f"more: it boots and runs under software emulation).")
    link = LinkSpec(profile=DEMO_PROFILE, no_delay=not netem)
    lab = Lab.up(args.name, clients=1, link=link, ports=DEMO_PORTS, server_tcp=args.server_tcp, say=say)
    tcp = lab.info["server"]["tcp"]
    try:
        print(f"server TCP: {servertcp.describe(tcp)}; choose with --server-tcp {'|'.join(servertcp.STARTS)}")
        flag = f" --name {lab.name}" if lab.name != DEFAULT_NAME else ""
        tool, argv = download_argv(f"http://server/{docroot.EXPERIMENT_FILE}", 120)
        shown = "curl -o /dev/null" if tool == "curl" else shlex.join(argv[:3])
        print(f"$ ratelimit lab exec{flag} client1 -- {shown} http://server/{docroot.EXPERIMENT_FILE}")
        d = lab.download("/" + docroot.EXPERIMENT_FILE, 1)
        stats = lab.statistics()
        model = lab.link_model()
    finally:
        lab.down()
    if d.bytes != size or d.http_code != 200:
        raise LabError(f"lab demo: the download returned HTTP {d.http_code} and {d.bytes} bytes, not 200 and {size}")
    full = replace(model, down_delay_us=prof.down.delay_us, up_delay_us=prof.up.delay_us, delay_stage=True)
    frames = model.response_frame_bytes(d.bytes, header=d.header_bytes)
    segments = len(model.segments(d.bytes + d.header_bytes))
    rows = [r for r in stats["links"] if r.get("bytes")]
    carried = sum(r["bytes"] for r in rows if r["direction"] == "dest")
    resent = carried - frames - CONTROL_FRAMES_BYTES  # what TCP sent twice, if anything
    resent = resent if resent > CONTROL_FRAMES_BYTES else 0
    rate_f = model.layer.carried_bps(rate)
    print()
    print(f"  measured    {d.seconds:5.2f} s   {tool} on client1 (TCP handshake {d.connect_s * 1000:.0f} ms)")
    print(f"  the model   {d.model_seconds(model):5.2f} s   this link{'' if netem else ' on this kernel'}: handshake, "
          f"request and {frames:,} bytes of {model.layer.name} frames ({d.bytes:,} + a {d.header_bytes}-byte header "
          f"in {segments} TCP segments) at {rate_f:,} bit/s"
          + ("" if netem else "; no delay stage, so the last packet of each burst leaves at once"))
    packet_s = model.layer.frame_bytes(model.mss_bytes + 40) * 8 / rate_f
    if resent:
        print(f"              TCP also sent {resent:,} bytes again: its retransmission timeout, set from the "
              f"handshake's round trip, is shorter than the {packet_s:.2f} s a full packet takes on this line "
              f"(as behind a real modem); the copies queue behind the data"
              + (f" (the server's RTO floor is {servertcp.ms_text(tcp['rto_min_ms'])}; --server-tcp rfc6298 "
                 f"raises it to {servertcp.ms_text(servertcp.STARTS['rfc6298'].rto_min_ms)})"
                 if tcp["rto_min_ms"] < packet_s * 1000 else ""))
    if not netem:
        print(f"  whole link  {d.model_seconds(full):5.2f} s   with the modem's {prof.down.delay_us // 1000} ms "
              f"each way (ratelimit lab demo --vm)")
    print(f"  theory      {size * 8 / rate:5.2f} s   {size:,} bytes x 8 / {rate:,} bit/s, as in 2000")
    if prof.reference_bps:
        real = d.bytes * 8 / prof.reference_bps
        mine = model.response_seconds(d.bytes, header=0)
        print(f"  real modem  {real:5.2f} s   {d.bytes:,} bytes at {prof.reference_bps / 8:,.0f} bytes/s, what a real "
              f"28.8K moved (profile sources); the model sends them in {mine:.2f} s ({mine / real - 1:+.1%})")
    print()
    print(f"  the link on the router ({lab.topo.router}/{lab.topo.router_client_if}), counted in "
          f"{model.layer.name} frame bytes:")
    print(f"  {'DIR':<5} {'HOST':<12} {'BYTES':>8} {'PACKETS':>8} {'DROPS':>6} {'OVERLIM':>8}")
    for r in sorted(rows, key=lambda r: r["direction"]):
        print(f"  {'down' if r['direction'] == 'dest' else 'up':<5} {r['host']:<12} "
              f"{r['bytes']:>8,} {r['packets']:>8,} {r['drops']:>6,} {r['overlimits']:>8,}")
    print()
    print(f"done in {time.monotonic() - t_start:.0f} s; the lab is down again. Next: "
          f"ratelimit lab up --profile {DEMO_PROFILE}" + (" --no-delay" if not netem else "")
          + " (docs/lab.md)")
    return 0
