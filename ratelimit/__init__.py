"""ratelimit: make a Linux router emulate thousands of slow or distant links.

One package per concern, each importing only those before it (docs/design.md, "The
packages"; each package's docstring says what it knows and what it may import):

  errors      the one exception family users see, with exit codes
  spec        the vocabulary, pure: units, names, link layers, cohorts, requests, the link model
  traces      links that change over time, pure: traces, schedules, capacity, phases
  profiles    the files a user names: profiles, scenarios, and the traces they name
  plan        the compiler, pure: a request becomes a plan of tc operations
  kernel      the only code that talks to traffic control; the probe; the VM runner
  state       records of what is installed, rollback and repair
  driver      traced links over time: each step's changes, and the driver process
  service     what the front ends call: make a request, apply, clean, read out
  containers  Docker and Podman containers as targets and hosts of links
  cli, lab    the front ends: the command line, and the labs with their fixtures
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
