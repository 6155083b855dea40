"""HTB: the qdisc's global options and a class's rate, ceil and buffers."""

import struct

from ..nl import (NLA_TYPE_MASK, NLATTR, TCA_KIND, TCA_OPTIONS, U32_MAX, U64, attr, attr_str, attrs, hexof, nest,
                  rebuild)
from ..rates import (LINKLAYER_ATM, LINKLAYER_ETHERNET, RATESPEC, cell_log_for, Clock, decode_ratespec, rate_bytes,
                     rate_table, ratespec)

TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_CTAB, TCA_HTB_RTAB = 1, 2, 3, 4
TCA_HTB_RATE64, TCA_HTB_CEIL64 = 6, 7
HTB_DEFAULT_MTU = 1600  # tc's default when a class gives no "mtu"
HTB_OPT = struct.Struct("=12s12sIIIII")  # rate, ceil, buffer, cbuffer, quantum, level, prio
HTB_GLOB = struct.Struct("=IIIII")  # version, rate2quantum, defcls, debug, direct_pkts
_PARMS_FLAT = struct.Struct("=" + RATESPEC.format[1:] * 2 + HTB_OPT.format[7:])  # HTB_OPT, its rate specs unpacked

KIND = attr_str(TCA_KIND, "htb")
# Where ``class_packer``'s options (TCA_KIND, TCA_OPTIONS, TCA_HTB_PARMS, HTB_OPT) hold what
# changes with a class's rates, from TCA_KIND on: the rate specs' rates, buffer, cbuffer.
_PARMS_AT = len(KIND) + 2 * NLATTR.size
RATE_AT, CEIL_AT, BUFFER_AT, CBUFFER_AT = (_PARMS_AT + at for at in (8, 20, 24, 28))


def qdisc_options(default_minor: int) -> bytes:
    """TCA_KIND + TCA_OPTIONS of ``tc qdisc add ... htb default MINOR`` (r2q 10)."""
    return KIND + nest(TCA_OPTIONS, attr(TCA_HTB_INIT, HTB_GLOB.pack(3, 10, default_minor, 0, 0)))


def class_options(rate_bps: int, ceil_bps: int, burst: int, quantum: int, mpu: int, overhead: int, atm: bool,
                  clk: Clock, tables: bool = False) -> bytes:
    """TCA_KIND + TCA_OPTIONS of an HTB class.  The two 1 KiB rate tables are left
    out unless ``tables``: a kernel reads them only when the rate spec's link layer
    is unknown, and ours names it (Ethernet, or ATM), as tc's does.  ``overhead`` is
    added to every packet's length (tc's ``overhead``), ``atm`` counts it in cells."""
    rate, ceil = rate_bytes(rate_bps), rate_bytes(ceil_bps)
    layer = LINKLAYER_ATM if atm else LINKLAYER_ETHERNET
    parms = HTB_OPT.pack(ratespec(rate, HTB_DEFAULT_MTU, mpu, overhead, layer),
                         ratespec(ceil, HTB_DEFAULT_MTU, mpu, overhead, layer),
                         clk.xmittime(rate, burst), clk.xmittime(ceil, burst), quantum, 0, 0)
    parts = []
    if rate > U32_MAX:
        parts.append(attr(TCA_HTB_RATE64, U64.pack(rate)))
    if ceil > U32_MAX:
        parts.append(attr(TCA_HTB_CEIL64, U64.pack(ceil)))
    parts.append(attr(TCA_HTB_PARMS, parms))
    if tables:
        parts.append(attr(TCA_HTB_RTAB, rate_table(min(rate, U32_MAX), HTB_DEFAULT_MTU, mpu, clk, atm)))
        parts.append(attr(TCA_HTB_CTAB, rate_table(min(ceil, U32_MAX), HTB_DEFAULT_MTU, mpu, clk, atm)))
    return KIND + nest(TCA_OPTIONS, *parts)


def class_packer(quantum: int, mpu: int, overhead: int, atm: bool, clk: Clock, tables: bool = False):
    """``class_options`` for a class's fixed parameters, as a function of its rate, ceil and
    burst: the same bytes, with what does not depend on the rates packed once (a trace
    driver sets new rates on thousands of classes a step)."""
    layer = LINKLAYER_ATM if atm else LINKLAYER_ETHERNET
    cell_log = cell_log_for(HTB_DEFAULT_MTU)
    head = KIND + NLATTR.pack(8 + HTB_OPT.size, TCA_OPTIONS) + NLATTR.pack(4 + HTB_OPT.size, TCA_HTB_PARMS)
    pack, xmittime = _PARMS_FLAT.pack, clk.xmittime

    def options(rate_bps: int, ceil_bps: int, burst: int) -> bytes:
        rate, ceil = rate_bytes(rate_bps), rate_bytes(ceil_bps)
        if tables or rate > U32_MAX or ceil > U32_MAX:
            return class_options(rate_bps, ceil_bps, burst, quantum, mpu, overhead, atm, clk, tables)
        buffer = xmittime(rate, burst)
        return head + pack(cell_log, layer, overhead, -1, mpu, rate, cell_log, layer, overhead, -1, mpu, ceil,
                           buffer, buffer if ceil == rate else xmittime(ceil, burst), quantum, 0, 0)
    return options


def decode_qdisc(buf, s, e) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_HTB_INIT and pe - ps >= HTB_GLOB.size:
            version, r2q, defcls, debug, _direct_pkts = HTB_GLOB.unpack_from(buf, ps)  # direct_pkts counts
            out.append(("init", version, r2q, defcls, debug))
        else:
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def decode_class(buf, s, e) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_HTB_PARMS and pe - ps >= HTB_OPT.size:
            rate, ceil, buffer, cbuffer, quantum, level, prio = HTB_OPT.unpack_from(buf, ps)
            out.append(("parms", decode_ratespec(rate), decode_ratespec(ceil), "buffer", buffer, "cbuffer", cbuffer,
                        "quantum", quantum, "level", level, "prio", prio))
        else:
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def replayable_qdisc(payload: bytes) -> bytes:
    """Dumped qdisc options as a request carries them: a dump gives the version as HTB_VER
    (0x30011), a request must give its major (3)."""
    def fix(kind, body):
        if kind & NLA_TYPE_MASK == TCA_HTB_INIT and len(body) >= HTB_GLOB.size:
            version = HTB_GLOB.unpack_from(body)[0]
            return HTB_GLOB.pack(version >> 16 or version, *HTB_GLOB.unpack_from(body)[1:]) + body[HTB_GLOB.size:]
        return body
    return rebuild(payload, 0, len(payload), fix)
