"""The CPU the driver's steps cost, pure: the reference ``Stepper`` and the array driver's
``VectorStepper`` with its messages (``kernel.rounds``), for N links, no kernel.

    python -m bench.stepcost N [SCALE]

N links of ``lte-drive.down`` at SCALE (0.002), random phases, 100 ms steps: the process
time of 100 steps after the first (``time.process_time``), per step and per change, of
each, one after the other in one run, and their ratio.  The reference's is its steps
alone; the arrays' includes packing every change's message.
"""

import sys
import time

from ratelimit.driver.vector import VectorStepper
from ratelimit.kernel.encode import Encoder
from ratelimit.kernel.rates import Clock
from ratelimit.kernel.rounds import Templates, stamp

from .spansim import traced_stepper

STEPS = 100


def cost(links: int, scale: float = 0.002, arrays: bool = False) -> dict:
    stepper = traced_stepper(links, 100, trace_down="lte-drive.down", trace_scale=scale, bandwidth="10gbit")
    pack = None
    if arrays:
        stepper = VectorStepper(stepper.links, 100)
        templates = Templates([link.klass for link in stepper.links], [link.gate for link in stepper.links])
        templates.ready(Encoder(lambda name: 1, Clock()))

        def pack(round_):
            stamp(templates.messages(round_.parts), 1, 1024)
    stepper.changes(0, resend=True)
    began, changes = time.process_time(), 0
    for k in range(1, STEPS + 1):
        step = stepper.changes(k)
        if pack is not None:
            pack(step)
        changes += len(step)
        stepper.landed(0.0, 0.0)
    spent = time.process_time() - began
    return {"links": links, "scale": scale, "stepper": "arrays" if arrays else "reference",
            "ms_a_step": spent / STEPS * 1000, "changes_a_step": changes / STEPS,
            "us_a_change": spent / max(1, changes) * 1e6}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        raise SystemExit(f"usage: python -m bench.stepcost N [SCALE] (N: links, 1 or more; got {argv[:1]})")
    scale = float(argv[1]) if len(argv) > 1 else 0.002
    ref, arr = (cost(int(argv[0]), scale, arrays) for arrays in (False, True))
    for r in (ref, arr):
        print(f"{r['links']} links x {r['scale']:g}, {r['stepper']}: {r['ms_a_step']:.2f} ms of CPU a step, "
              f"{r['changes_a_step']:.0f} changes a step, {r['us_a_change']:.2f} us a change")
    print(f"reference / arrays, a change: {ref['us_a_change'] / arr['us_a_change']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
