"""ratelimit: make a Linux router emulate thousands of slow or distant links.

Package map (docs/design.md has one line per module):
  errors, units, model, selectors, profiles,  the vocabulary, parsed once at the edge
  names, getopt
  linklayer, linkmodel                        framing and rates; what a transfer should take
  compile, u32tree, plan, diff                request -> plan of tc operations, pure; changes in place
  service, state, progress, cli               apply/clean/list/stats, their state and command line
  fingerprint, recovery, signals, persist     what ratelimit owns; rollback and repair; save/restore
  tracefile, schedulefile, capacity, phases,  links that change over time: the inputs, the capacity,
  tracespec, gate, steps, follow              each link's phase, a cohort's traces, the tbf gate,
                                              each step's changes, the driver (ratelimit follow)
  kernel/   the executor (the only code that changes traffic control), netlink encoding and
            decoding, namespaces and devices through pyroute2, the kernel probe, the VM runner
  lab/      the namespace lab, its demo, the docroot server and the pytest fixtures
"""

from pathlib import Path

__version__ = "0.4.0"

# The directory holding the ratelimit package: the checkout when run from one
# (then it holds profiles/, vagrant/ and webui/ too).
SOURCE_ROOT = Path(__file__).resolve().parent.parent

# The shipped profiles, with their traces/, schedules/ and scenarios/: installed beside
# the package (setup.py packages profiles/ as ratelimit.shipped_profiles), or profiles/
# in a checkout.
SHIPPED = Path(__file__).resolve().parent / "shipped_profiles"
if not SHIPPED.is_dir():
    SHIPPED = SOURCE_ROOT / "profiles"
