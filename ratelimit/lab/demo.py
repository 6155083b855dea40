"""``ratelimit lab demo``: the first command to run -- the 10,000-byte download of the
2000 experiments through an emulated 28.8k modem, timed and explained."""

from __future__ import annotations

import time

from .. import profiles
from ..model import v03_burst_bytes
from ..kernel.probe import probe
from ..kernel.vm import in_vm
from . import docroot
from .cli import _run_in_vm, _say
from .core import Lab, LabError
from .link import DEFAULT_BURST, LinkSpec
from .measure import expected_seconds, wire_bytes
from .store import DEFAULT_NAME

DEMO_NAME = "demo"
DEMO_PROFILE = "modem-28k8"
DEMO_PORTS = "10000-10099"  # one download needs one port; fewer links build faster in shape mode


def demo(args) -> int:
    if args.vm and not in_vm():
        return _run_in_vm(["demo", "--name", args.name])
    t_start = time.monotonic()
    prof = profiles.load(DEMO_PROFILE)
    rate = prof.down.rate_bps
    size = docroot.EXPERIMENT_BYTES
    have = probe(["netem", "police"])
    mode = "police" if have["police"] else "shape"
    print(f"ratelimit lab demo: one client downloads the {size:,}-byte file of the 2000 experiments "
          f"through a router that emulates a {rate / 1000:g} kbit/s modem ({DEMO_PROFILE}).")
    if not have["netem"]:
        print(f"note: this kernel lacks netem (module sch_netem), so the modem's "
              f"{prof.down.delay_us // 1000} ms delay each way is left out; the rate is emulated in full. "
              f"`ratelimit lab demo --vm` runs the whole profile in a full-kernel VM (a minute or more: "
              f"it boots and runs under software emulation).")
    if not have["police"]:
        print("note: this kernel lacks act_police, so the rate is enforced by shaping (queueing) "
              "instead of policing (dropping); both give the profile's rate.")
    link = LinkSpec(profile=DEMO_PROFILE, mode=mode, burst=DEFAULT_BURST, no_delay=not have["netem"])
    lab = Lab.up(args.name, clients=1, link=link, ports=DEMO_PORTS, say=_say)
    try:
        flag = f" --name {lab.name}" if lab.name != DEFAULT_NAME else ""
        print(f"$ ratelimit lab exec{flag} client1 -- curl -o /dev/null http://server/{docroot.EXPERIMENT_FILE}")
        d = lab.download("/" + docroot.EXPERIMENT_FILE, 1)
        stats = lab.statistics()
    finally:
        lab.down()
    if d.bytes != size or d.http_code != 200:
        raise LabError(f"lab demo: the download returned HTTP {d.http_code} and {d.bytes} bytes, "
                                f"not 200 and {size}")
    rows = [r for r in stats["links"] if r.get("bytes") and r["port"] == d.local_port]
    wire = sum(r["bytes"] for r in rows if r["direction"] == "dest")
    burst = v03_burst_bytes(rate, DEFAULT_BURST, 1514)
    theory = size * 8 / rate
    link_s = expected_seconds(size, rate, DEFAULT_BURST)
    print()
    print(f"  measured   {d.seconds:5.2f} s   curl on client1, port {d.local_port} "
          f"(TCP handshake {d.connect_s * 1000:.0f} ms)")
    print(f"  theory     {theory:5.2f} s   {size:,} bytes x 8 / {rate:,} bit/s, as in 2000")
    print(f"  this link  {link_s:5.2f} s   + headers (~{wire_bytes(size):,} bytes on the wire), "
          f"- the first {burst:,} bytes, which pass at once (--burst {DEFAULT_BURST})")
    print()
    print(f"  link statistics on the router ({lab.topo.router}/{lab.topo.router_client_if}), "
          f"the connection's (host, port):")
    print(f"  {'DIR':<5} {'HOST':<12} {'PORT':>6} {'BYTES':>8} {'PACKETS':>8} {'DROPS':>6} {'OVERLIM':>8}")
    for r in sorted(rows, key=lambda r: r["direction"]):
        print(f"  {'down' if r['direction'] == 'dest' else 'up':<5} {r['host']:<12} {r['port']:>6} "
              f"{r['bytes']:>8,} {r['packets']:>8,} {r['drops']:>6,} {r['overlimits']:>8,}")
    drops = sum(r["drops"] for r in rows if r["direction"] == "dest")
    if drops:
        print(f"  (the policer dropped {drops} packet(s) above the rate; TCP sent them again, which is "
              f"why down counted {wire:,} bytes)")
    elif wire > 1.15 * wire_bytes(size):
        print(f"  (down counted {wire:,} bytes, more than the file: part of TCP's first window waited in "
              f"the modem's queue longer than TCP's 1 s initial timeout and was sent again)")
    print()
    print(f"done in {time.monotonic() - t_start:.0f} s; the lab is down again. Next: "
          f"ratelimit lab up --profile {DEMO_PROFILE}" + (" --no-delay" if not have["netem"] else "")
          + " (docs/lab.md)")
    return 0


