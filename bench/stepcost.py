"""The CPU the driver's steps cost, pure: ``Stepper.changes`` for N links, no kernel.

    python -m bench.stepcost N [SCALE]

N links of ``lte-drive.down`` at SCALE (0.002), random phases, 100 ms steps: the process
time of 100 steps after the first (``time.process_time``), per step and per change.
"""

import sys
import time

from .spansim import traced_stepper

STEPS = 100


def cost(links: int, scale: float = 0.002) -> dict:
    stepper = traced_stepper(links, 100, trace_down="lte-drive.down", trace_scale=scale, bandwidth="10gbit")
    stepper.changes(0, resend=True)
    began, changes = time.process_time(), 0
    for k in range(1, STEPS + 1):
        changes += len(stepper.changes(k))
        stepper.landed(0.0, 0.0)
    spent = time.process_time() - began
    return {"links": links, "scale": scale, "ms_a_step": spent / STEPS * 1000, "changes_a_step": changes / STEPS,
            "us_a_change": spent / max(1, changes) * 1e6}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        raise SystemExit(f"usage: python -m bench.stepcost N [SCALE] (N: links, 1 or more; got {argv[:1]})")
    r = cost(int(argv[0]), float(argv[1]) if len(argv) > 1 else 0.002)
    print(f"{r['links']} links x {r['scale']:g}: {r['ms_a_step']:.2f} ms of CPU a step, {r['changes_a_step']:.0f} "
          f"changes a step, {r['us_a_change']:.2f} us a change")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
