"""The service the front ends call: a request made from what a person typed, apply, clean and
preview (``actions``), what is installed and its counters (``readout``), and a long
apply's progress line.

May import: errors, spec, traces, profiles, plan, kernel, state, driver.
"""

from .actions import IMPAIRMENTS, V03_BURST, apply, clean, for_container, make_request, preview

__all__ = ["IMPAIRMENTS", "V03_BURST", "apply", "clean", "for_container", "make_request", "preview"]
