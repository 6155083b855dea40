"""``python -m ratelimit.webui ...`` (installed) or ``python -m webui ...`` (from a source tree) is ``ratelimit web ...``."""

from .cli import main

main()
