"""bfifo and pfifo: a plain queue with a limit in bytes or packets (struct tc_fifo_qopt)."""

import struct

from ..nl import TCA_KIND, TCA_OPTIONS, attr, attr_str

FIFO_QOPT = struct.Struct("=I")  # limit


def options(kind: str, limit: int) -> bytes:
    return attr_str(TCA_KIND, kind) + attr(TCA_OPTIONS, FIFO_QOPT.pack(limit))


def decode(buf, s, e) -> tuple:
    return (("limit", FIFO_QOPT.unpack_from(buf, s)[0]),) if e - s >= FIFO_QOPT.size else ()
