"""The service: what the CLI, the web UI and the lab call to change and read an interface.

Knows: apply, clean and preview (``actions``); what is installed and its counters
(``readout``); save and restore (``persist``); a long apply's progress line (``progress``).
May import: everything below it (spec, traces, profiles, plan, kernel, state, driver);
never a front end (cli, lab, webui).
"""

from .actions import IMPAIRMENTS, V03_BURST, apply, clean, for_container, make_request, preview

__all__ = ["IMPAIRMENTS", "V03_BURST", "apply", "clean", "for_container", "make_request", "preview"]
