"""Progress of a long apply on one terminal line (the CLI's and the lab's)."""

import time


def terminal(stream, label: str, every_s: float = 0.1):
    """A ``progress(done, total)`` callback drawing ``LABEL  42% (n/total operations)`` on
    ``stream``, at most every ``every_s`` seconds, or None when ``stream`` is not a terminal."""
    if not getattr(stream, "isatty", lambda: False)():
        return None
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every_s:
            return
        last[0] = now
        stream.write(f"\r{label} {100 * done // max(total, 1):3d}% ({done}/{total} operations)")
        if done >= total:
            stream.write("\n")
        stream.flush()
    return show
