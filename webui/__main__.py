"""``python -m webui ...`` is ``ratelimit web ...``."""

from .cli import main

main()
