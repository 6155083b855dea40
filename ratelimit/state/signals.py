"""SIGINT and SIGTERM during a change: stop where it stands, roll back, then exit.

``guard()`` turns both signals into ``Stop`` (a BaseException, so no ``except
Exception`` swallows it) while it is *armed*, raised wherever the change stands; the
service then rolls the change back.  ``Guard.hold()`` disarms it for good: rolling back
or recording what was done must not be cut short, and a signal that arrives then is only
noted (``pending``).  Only the main thread receives signals; elsewhere (the dashboard's
request threads) ``guard()`` changes nothing.
"""

import signal
import threading
from contextlib import contextmanager

from ..kernel.netns import parent_only

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop(BaseException):
    """A signal asked the change to stop."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class Guard:
    def __init__(self):
        self.armed = True
        self.pending: int | None = None

    def arm(self) -> None:
        """From now on, raise Stop for a signal (where the code it interrupts can handle it)."""
        self.armed = True

    def hold(self) -> None:
        """From now on, note signals instead of raising them."""
        self.armed = False

    def _handler(self, signum, _frame):
        if self.armed:
            self.armed = False  # one Stop per change: a second ^C must not cut the rollback short
            raise Stop(signum)
        self.pending = self.pending or signum


@contextmanager
def guard(armed: bool = True):
    """A Guard whose handlers are installed for the block (main thread only)."""
    g = Guard()
    g.armed = armed
    if threading.current_thread() is not threading.main_thread():
        yield g
        return
    handler = parent_only(g._handler)
    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield g
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
