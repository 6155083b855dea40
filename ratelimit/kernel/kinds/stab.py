"""Size tables (``tc qdisc add ... stab ...``, TCA_STAB): how a qdisc meters packet lengths."""

import struct

from ...plan.ops import STAB_MTU, STAB_TSIZE
from ..nl import TCA_STAB, attr, attrs, hexof, nest

TCA_STAB_BASE, TCA_STAB_DATA = 1, 2
LINKLAYER_ETHERNET, LINKLAYER_ATM = 1, 2
SIZESPEC = struct.Struct("=BBhiIIII")  # cell_log size_log cell_align overhead linklayer mpu mtu tsize
ATM_CELL, ATM_PAYLOAD = 53, 48


def options(stab) -> bytes:
    """The TCA_STAB nest tc sends for ``stab`` (plan.Stab), table included for ATM."""
    if not stab.atm:  # tc sends no table for Ethernet without an mpu: the kernel adds the overhead
        return nest(TCA_STAB, attr(TCA_STAB_BASE, SIZESPEC.pack(0, 0, 0, stab.overhead_bytes, LINKLAYER_ETHERNET,
                                                               0, 0, 0)))
    cell_log = 0
    while (STAB_MTU >> cell_log) > STAB_TSIZE - 1:
        cell_log += 1
    table = [-(-((i + 1) << cell_log) // ATM_PAYLOAD) * ATM_CELL for i in range(STAB_TSIZE)]
    spec = SIZESPEC.pack(cell_log, 0, -1, stab.overhead_bytes, LINKLAYER_ATM, 0, STAB_MTU, STAB_TSIZE)
    return nest(TCA_STAB, attr(TCA_STAB_BASE, spec), attr(TCA_STAB_DATA, struct.pack(f"={STAB_TSIZE}H", *table)))


def decode(buf, s, e) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_STAB_BASE and pe - ps >= SIZESPEC.size:
            out.append(("base",) + SIZESPEC.unpack_from(buf, ps))
        else:
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)
