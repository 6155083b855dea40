"""Trace files in mahimahi's format, read with the rules its ``mm-link`` applies.

The format (mahimahi ``src/frontend/link_queue.cc``, ``LinkQueue::LinkQueue``; read at
commit ae477d4): each line is a whole number of milliseconds from the start of the
trace, and each line is one *delivery opportunity* of ``PACKET_BYTES`` (mahimahi's
``PACKET_SIZE``, 1,504: the 1,500-byte MTU of its TUN device plus the 4-byte packet
information header that a TUN device opened without ``IFF_NO_PI`` puts before every
packet it hands over).  The same timestamp on several lines is several opportunities
in that millisecond.  The trace loops: when its last opportunity is used, time shifts
by the last timestamp (``base_timestamp_ += schedule_.back()``), so an opportunity at
``t`` recurs at ``t + k x period`` for every k >= 0 (``mm-link --once`` stops instead).

What mm-link refuses, and so do we (each a one-line ``UsageError`` naming the file
and the line):

* an empty line, anywhere (``"invalid empty line"``; a last line without its newline
  is read, a blank line after the last newline is an empty line);
* a line that is not a whole number (mm-link's ``myatoi``: ``strtol`` must consume the
  whole line, so a carriage return of a Windows line end, a fraction or trailing text
  are refused).  ``strtol`` also takes leading blanks and a sign, which we refuse: a
  timestamp here is ASCII digits only (mm-link would read ``-1`` as a huge unsigned
  time);
* a timestamp smaller than the one before it ("monotonically nondecreasing");
* a file with no timestamp (``"no valid timestamps found"``);
* a trace whose last timestamp is 0 (``"trace must last for a nonzero amount of
  time"``): its last timestamp is its period.

Added here (mm-link reads whatever fits in memory): a trace is a regular file (a
directory, a device, a FIFO or a socket is refused before any
read: ``/dev/zero`` would never end and a FIFO would block), of at most ``MAX_BYTES``
and ``MAX_LINES`` (checked on the file's size, then on the bytes read, of which at
most ``MAX_BYTES + 1`` are), with timestamps up to ``MAX_PERIOD_MS`` (one day).  The
largest trace mahimahi ships, ``Verizon-LTE-driving.down``, has about 1.1 million
lines in 7.8 MB (``TMobile-LTE-driving.down``: 505,078 lines, 3.4 MB; its longest,
``Verizon-EVDO-driving.up``, lasts 1,064,718 ms, under 18 minutes): the limits leave
three to four times that room and keep a loaded trace under 32 MB of memory (8 bytes a
timestamp).
"""

import bisect
import itertools
import operator
import re
from array import array
from dataclasses import dataclass
from pathlib import Path

from ..errors import FieldError, shown, UsageError
from ..spec import userfile

PACKET_BYTES = 1504  # mahimahi's PACKET_SIZE: one opportunity; an MTU-sized IP packet and TUN's 4-byte header
TUN_HEADER_BYTES = 4  # struct tun_pi (flags, protocol) before each packet mm-link reads from its TUN device
MAX_BYTES = 32 * 1024 * 1024
MAX_LINES = 4_000_000
MAX_PERIOD_MS = 24 * 3600 * 1000
MAX_DIGITS = 18  # a longer line is beyond MAX_PERIOD_MS whatever its digits (leading zeros are read)
ALLOWED = "a whole number of milliseconds, ASCII digits only, one per line"
_NOT_DIGITS = re.compile(rb"[^0-9\n]")


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace: its delivery opportunities' times (``timestamps_ms``, nondecreasing,
    one per opportunity, as the file lists them) and its period (the last of them)."""

    path: str
    timestamps_ms: array  # of 'q'

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def period_ms(self) -> int:
        return self.timestamps_ms[-1]

    @property
    def opportunities(self) -> int:
        """Opportunities in one period."""
        return len(self.timestamps_ms)

    @property
    def mean_bps(self) -> float:
        """The trace's average capacity over one period, in mm-link's bits (``PACKET_BYTES``
        per opportunity) per second."""
        return self.opportunities * PACKET_BYTES * 8 * 1000 / self.period_ms


def load(path, field: str = "trace") -> Trace:
    """The trace in the file ``path``; ``field`` starts every error (``--trace-down``, a
    profile's key).  Reads at most ``MAX_BYTES + 1`` bytes, and nothing from anything but
    a regular file (``userfile.read``)."""
    where = f"{field} {path}"
    return parse(userfile.read(path, MAX_BYTES, where, f"a trace file ({ALLOWED})"), where, str(path))


def parse(raw: bytes, where: str, path: str = "") -> Trace:
    """The trace in ``raw`` (a file's bytes); ``where`` starts every error ("trace FILE")."""
    if len(raw) > MAX_BYTES:
        raise UsageError(f"{where}: is more than {MAX_BYTES:,} bytes, the most it may hold")
    if not raw:
        raise UsageError(f"{where}: holds no timestamps (an empty file; {ALLOWED})")
    body = raw[:-1] if raw.endswith(b"\n") else raw
    count = body.count(b"\n") + 1
    if count > MAX_LINES:
        raise UsageError(f"{where}: line {MAX_LINES + 1:,}: is past {MAX_LINES:,} lines, the most a trace holds")
    bad = _NOT_DIGITS.search(body)
    if bad:
        _refuse_text(body, bad.start(), where)
    lines = body.split(b"\n")
    if b"" in lines:
        n = lines.index(b"") + 1
        raise UsageError(f"{where}: line {n}: is empty (mm-link refuses empty lines; {ALLOWED})")
    longest = max(map(len, lines))
    if longest > MAX_DIGITS:  # no int() of a number of thousands of digits
        n = next(i for i, line in enumerate(lines, 1) if len(line) == longest)
        raise FieldError(f"{where}: line {n}", lines[n - 1].decode(),
                         f"is beyond {MAX_PERIOD_MS:,} ms (one day), the longest a trace lasts")
    ts = array("q", map(int, lines))
    down = next(itertools.compress(itertools.count(1), map(operator.lt, itertools.islice(ts, 1, None), ts)), None)
    if down is not None:
        raise FieldError(f"{where}: line {down + 1}", ts[down],
                         f"is less than {ts[down - 1]} on line {down} (timestamps never decrease)")
    if ts[-1] > MAX_PERIOD_MS:
        n = bisect.bisect_right(ts, MAX_PERIOD_MS) + 1
        raise FieldError(f"{where}: line {n}", ts[n - 1],
                         f"is beyond {MAX_PERIOD_MS:,} ms (one day), the longest a trace lasts")
    if ts[-1] == 0:
        raise FieldError(f"{where}: line {len(ts)}", 0,
                         "is the last timestamp: a trace must last longer than 0 ms (its last timestamp is its period)")
    return Trace(path or where, ts)


def _refuse_text(body: bytes, at: int, where: str):
    """The error for the byte at ``at``, which is neither a digit nor a newline."""
    n = body.count(b"\n", 0, at) + 1
    start = body.rfind(b"\n", 0, at) + 1
    end = body.find(b"\n", at)
    line = body[start:end if end >= 0 else len(body)]
    byte = body[at]
    if byte == 0x0D and at + 1 in (end, len(body)):
        why = "ends in a carriage return (a Windows line end, which mm-link refuses too; the trace needs Unix line ends)"
    elif byte >= 0x80:
        why = f"holds byte 0x{byte:02x} at column {at - start + 1}, which is not ASCII ({ALLOWED})"
    else:
        why = f"is not a timestamp ({ALLOWED}: no sign, space or fraction)"
    raise FieldError(f"{where}: line {n}", shown(line.decode("ascii", "backslashreplace")), why)
