"""Make ratelimit's own traces (mahimahi's format), deterministically from fixed seeds.

    python profiles/traces/make.py [DIR]     writes NAME.down and NAME.up for each trace
                                             into DIR (default: this directory)

Each trace is a capacity curve c(t) in each direction, turned into delivery
opportunities of 1,504 bytes (``tracefile.PACKET_BYTES``) one millisecond at a time:
a credit grows by c(t) / (8 x 1,504) every millisecond, and each whole opportunity
of it becomes a line with that millisecond's timestamp (several in one millisecond
repeat it).  The last millisecond of the trace always gets one (a trace's last
timestamp is its period, so every trace lasts exactly its duration).  Times run from
1 ms to the duration.

The curves (parameters in ``TRACES``; docs/profiles.md, "Traces"):

* **lte-drive**: a car on an LTE network.  Every 100 ms, the log of the capacity takes
  a step of a first-order autoregressive process (a sampled Ornstein-Uhlenbeck process:
  correlation time ``tau_s``, standard deviation ``sigma`` of the log), scaled so that
  its mean is the ``lte`` profile's rate (9 Mbit/s down, 1.5 up), capped at ``cap`` x
  that mean; handovers arrive as a Poisson process (mean ``handover_every_s``), each a
  gap of no capacity of ``handover_ms``, in both directions at once.  Down and up follow
  one path (one radio channel), each with its own mean.
* **3g-walk**: a pedestrian on UMTS/HSPA: the same process, slower and narrower, around
  the ``3g`` profile's rates (1.6 Mbit/s down, 768 kbit/s up), with deep fades (a
  Poisson process of periods at ``fade_depth`` of the capacity) instead of handovers.
* **tunnel**: a train entering a tunnel: LTE as in lte-drive (narrower), then the
  capacity falls linearly to nothing over ``fade_s``, stays at nothing for
  ``outage_s``, and comes back linearly over ``recover_s``; the trace then goes on as
  before the tunnel.

These are models with stated parameters, not recordings: they are for testing how a
server behaves under capacity that swings, drops out and returns, not for claims about
a given network.
"""

import math
import random
import sys
from pathlib import Path

OPPORTUNITY_BYTES = 1504  # tracefile.PACKET_BYTES (kept here so the script runs on its own)
STEP_MS = 100  # the capacity curves change every 100 ms

TRACES = {
    "lte-drive": dict(seed=23001, duration_s=60, down_bps=9_000_000, up_bps=1_500_000, tau_s=2.0, sigma=0.8,
                      cap=4.0, handover_every_s=15.0, handover_ms=(50, 250)),
    "3g-walk": dict(seed=23002, duration_s=120, down_bps=1_600_000, up_bps=768_000, tau_s=5.0, sigma=0.5,
                    cap=3.0, fade_every_s=25.0, fade_s=(0.5, 2.0), fade_depth=0.1),
    "tunnel": dict(seed=23003, duration_s=45, down_bps=9_000_000, up_bps=1_500_000, tau_s=2.0, sigma=0.3,
                   cap=3.0, tunnel_at_s=15.0, fade_s=3.0, outage_s=10.0, recover_s=2.0),
}


def _shape(rng: random.Random, p: dict) -> list[float]:
    """The capacity as a share of the mean, one value per ``STEP_MS``: a log-normal AR(1)
    path with mean 1, capped at ``cap``."""
    steps = p["duration_s"] * 1000 // STEP_MS
    a = math.exp(-STEP_MS / 1000 / p["tau_s"])
    x = rng.gauss(0.0, p["sigma"])
    out = []
    for _ in range(steps):
        out.append(min(p["cap"], math.exp(x - p["sigma"] ** 2 / 2)))
        x = a * x + math.sqrt(1 - a * a) * rng.gauss(0.0, p["sigma"])
    return out


def _events(rng: random.Random, every_s: float, duration_s: float, length_s) -> list[tuple[float, float]]:
    """(start, end) seconds of a Poisson process of events of a length drawn from ``length_s``."""
    out, t = [], rng.expovariate(1 / every_s)
    while t < duration_s:
        length = rng.uniform(*length_s)
        out.append((t, min(duration_s, t + length)))
        t += length + rng.expovariate(1 / every_s)
    return out


def factors(name: str) -> list[float]:
    """The capacity of trace ``name`` over time, as a share of its mean rates, one value
    per ``STEP_MS`` (down and up share it)."""
    p = TRACES[name]
    rng = random.Random(p["seed"])
    shape = _shape(rng, p)

    def during(events, k):
        t = k * STEP_MS / 1000
        return any(a <= t < b for a, b in events)

    if name == "lte-drive":
        gaps = _events(rng, p["handover_every_s"], p["duration_s"], [ms / 1000 for ms in p["handover_ms"]])
        return [0.0 if during(gaps, k) else f for k, f in enumerate(shape)]
    if name == "3g-walk":
        fades = _events(rng, p["fade_every_s"], p["duration_s"], p["fade_s"])
        return [f * p["fade_depth"] if during(fades, k) else f for k, f in enumerate(shape)]
    start = p["tunnel_at_s"]
    dark, light = start + p["fade_s"], start + p["fade_s"] + p["outage_s"]
    out = []
    for k, f in enumerate(shape):
        t = k * STEP_MS / 1000
        if start <= t < dark:
            f *= (dark - t) / p["fade_s"]
        elif dark <= t < light:
            f = 0.0
        elif light <= t < light + p["recover_s"]:
            f *= (t - light) / p["recover_s"]
        out.append(f)
    return out


def opportunities(shares: list[float], mean_bps: float, duration_s: int) -> list[int]:
    """Timestamps (ms, 1 to the duration) of the opportunities of a capacity of
    ``share x mean_bps`` per ``STEP_MS``; the last millisecond always has one."""
    per_ms = [mean_bps * s / 8 / OPPORTUNITY_BYTES / 1000 for s in shares]
    out, credit = [], 0.0
    end = duration_s * 1000
    for ms in range(1, end + 1):
        credit += per_ms[(ms - 1) // STEP_MS]
        whole = int(credit)
        credit -= whole
        out.extend([ms] * whole)
    if not out or out[-1] != end:
        out.append(end)
    return out


def make(directory: Path) -> list[Path]:
    written = []
    for name, p in TRACES.items():
        shares = factors(name)
        for side in ("down", "up"):
            path = directory / f"{name}.{side}"
            stamps = opportunities(shares, p[f"{side}_bps"], p["duration_s"])
            path.write_text("".join(f"{t}\n" for t in stamps), encoding="ascii")
            written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    for written in make(target):
        print(written)
