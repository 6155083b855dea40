"""The service the front ends call: a request made from what a person typed (``request``:
``Options``, ``request_of``), apply, clean and preview (``actions``), what is installed and
its counters (``readout``), and a long apply's progress line.

May import: errors, spec, traces, profiles, plan, kernel, state, driver.
"""

from .actions import apply, clean, preview
from .request import IMPAIRMENTS, V03_BURST, for_container, make_request, Options, request_of

__all__ = ["IMPAIRMENTS", "V03_BURST", "Options", "apply", "clean", "for_container", "make_request", "preview",
           "request_of"]
