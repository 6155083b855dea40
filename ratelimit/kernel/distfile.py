"""netem's distribution tables as tc finds and reads them: ``NAME.dist`` in tc's lib dir, sent
as the table's numbers, each a native-endian s16 (a slot's: TCA_NETEM_SLOT_DIST).

Where: ``$TC_LIB_DIR`` when it is set (even empty, as tc takes it), else tc's own lib dir.
tc has one built in (its LIBDIR, ``/tc``); not knowing which, we look where distributions put
it: Debian's multiarch ``/usr/lib/<triplet>/tc``, then ``/usr/lib64/tc``, then ``/usr/lib/tc``;
the first we can read is the table.

What: lines starting with ``#`` and empty lines are skipped; every other line gives the
integers at its start, one after another (C's: an optional sign, then ``0x`` hex, a leading
``0`` octal, else decimal; blanks before each), up to the first thing that is none, the rest
of the line ignored.  Each number is kept modulo 2**16 as an s16, as tc stores it; at most
16384 of them (tc's MAX_DIST, the kernel's NETEM_DIST_MAX) and at least one.

>>> _numbers(b"# a table\\n 1 -2 0x10 010 x 5\\n\\n3")
[1, -2, 16, 8, 3]

May import: errors, plan.
"""

import os
import platform
import re
import struct
import sysconfig
from functools import lru_cache

from ..errors import FieldError
from ..plan.shaping import NetemQdisc

MAX_ENTRIES = 16 * 1024
_NUMBER = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|[1-9][0-9]*|0[0-7]*)")
_LONG = 1 << 63  # strtol's range: a longer number is held at its ends


def lib_dirs() -> tuple:
    """The directories a table is looked for in, in order (see the module's docstring)."""
    given = os.environ.get("TC_LIB_DIR")
    if given is not None:
        return (given,)
    triplets = [sysconfig.get_config_var("MULTIARCH"), f"{platform.machine()}-linux-gnu"]
    dirs = [f"/usr/lib/{t}/tc" for t in triplets if t] + ["/usr/lib64/tc", "/usr/lib/tc"]
    return tuple(dict.fromkeys(dirs))


def paths(name: str) -> tuple:
    """The files ``name``'s table is looked for in: ``paths("pareto")`` under ``TC_LIB_DIR=/x``
    is ``("/x/pareto.dist",)``."""
    return tuple(f"{d.rstrip('/')}/{name}.dist" for d in lib_dirs())


def table(name: str, field: str = "--slot") -> bytes:
    """The table ``name`` (``pareto``) as tc sends it: its numbers packed as native s16.  A
    FieldError naming ``field``, the name and every path looked at when none can be read."""
    tried = []
    for path in paths(name):
        try:
            return _read(path)
        except OSError as err:
            tried.append(f"{path} ({err.strerror or type(err).__name__})")
        except ValueError as err:
            tried.append(f"{path} ({err})")
    raise FieldError(field, f"distribution={name}", f"has no table tc could read (looked at {', '.join(tried)})")


def check_tables(ops) -> None:
    """``table`` of every slot distribution the netem stages among ``ops`` draw from: what
    refuses a missing one before anything is applied."""
    for name in sorted({op.params.slot.dist for op in ops if type(op) is NetemQdisc and op.params.slot is not None
                        and op.params.slot.dist}):
        table(name)


@lru_cache(maxsize=None)
def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        values = _numbers(f.read())
    if not values:
        raise ValueError("no numbers in it")
    if len(values) > MAX_ENTRIES:
        raise ValueError(f"{len(values)} numbers, more than {MAX_ENTRIES}")
    return struct.pack(f"={len(values)}h", *(((v + (1 << 15)) & 0xFFFF) - (1 << 15) for v in values))


def _numbers(data: bytes) -> list:
    out = []
    for line in data.split(b"\n"):
        if line.startswith(b"#"):
            continue
        pos = 0
        while m := _NUMBER.match(line, pos):
            digits = m.group(2)
            v = int(digits, 16) if digits[1:2] in (b"x", b"X") else int(digits, 8 if digits[:1] == b"0" else 10)
            out.append(max(-_LONG, min(_LONG - 1, -v if m.group(1) == b"-" else v)))
            pos = m.end()
    return out
