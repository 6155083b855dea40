"""``python -m ratelimit.lab ...`` is ``ratelimit lab ...`` (used by the VM and tests)."""

from .cli import _cli

raise SystemExit(_cli())
