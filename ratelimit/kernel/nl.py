"""Netlink framing: the constants, structs and helpers every message uses.

Pure: bytes in, bytes out.  A message is ``nlmsghdr`` (16 bytes) + a family
header (``tcmsg``, 20 bytes, for traffic control) + attributes (``len``,
``type``, payload padded to 4).  Handles are ints (``0x520000`` is ``52:``).
What is specific to one qdisc, class, filter or action kind lives in
``kinds/<kind>.py``.
"""

import struct
import sys

NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 2, 3, 4
NLM_F_REQUEST, NLM_F_ACK, NLM_F_ECHO = 0x1, 0x4, 0x8
NLM_F_DUMP = 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLM_F_DUMP_INTR = 0x10
NLM_F_ACK_TLVS = 0x200  # in an NLMSG_ERROR: extended-ack attributes follow
NLM_F_CAPPED = 0x100  # in an NLMSG_ERROR: the request is not echoed
NLMSGERR_ATTR_MSG = 1

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NEWTFILTER, RTM_DELTFILTER, RTM_GETTFILTER = 44, 45, 46

NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
TC_H_CLSACT_INGRESS, TC_H_CLSACT_EGRESS = 0xFFFFFFF2, 0xFFFFFFF3

TCA_KIND, TCA_OPTIONS, TCA_STATS, TCA_XSTATS, TCA_RATE, TCA_FCNT, TCA_STATS2 = 1, 2, 3, 4, 5, 6, 7
TCA_STAB, TCA_PAD, TCA_CHAIN = 8, 9, 11
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8

U32_MAX = 0xFFFFFFFF
ETHERTYPES = {"all": 0x0003, "ip": 0x0800, "ipv6": 0x86DD, "arp": 0x0806, "802.1q": 0x8100}
PROTOCOL_NAMES = {v: k for k, v in ETHERTYPES.items()}

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
RTM_GETLINK, IFLA_IFNAME, IFLA_LINKINFO, IFLA_INFO_KIND, IFLA_NUM_TX_QUEUES = 18, 3, 18, 1, 31
NLATTR = struct.Struct("=HH")
U32 = struct.Struct("=I")
U64 = struct.Struct("=Q")
ERRNO = struct.Struct("=i")
SEQ_OFFSET = struct.Struct("=I")  # nlmsghdr.seq, at offset 8


# ------------------------------------------------------------------ packing


def htons(value: int) -> int:
    return int.from_bytes(value.to_bytes(2, "big"), sys.byteorder)


def be32(value: int) -> int:
    """The int whose native bytes are ``value`` in network order."""
    return int.from_bytes(value.to_bytes(4, "big"), sys.byteorder)


def attr(kind: int, payload: bytes = b"") -> bytes:
    n = 4 + len(payload)
    return NLATTR.pack(n, kind) + payload + b"\0" * (-n & 3)


def attr_u32(kind: int, value: int) -> bytes:
    return NLATTR.pack(8, kind) + U32.pack(value)


def attr_str(kind: int, text: str) -> bytes:
    return attr(kind, text.encode() + b"\0")


def nest(kind: int, *children: bytes) -> bytes:
    body = b"".join(children)
    return NLATTR.pack(4 + len(body), kind) + body


def message(msg_type: int, flags: int, seq: int, body: bytes) -> bytes:
    return NLMSGHDR.pack(16 + len(body), msg_type, flags, seq, 0) + body


def tcmsg(ifindex: int, handle: int, parent: int, info: int = 0) -> bytes:
    return TCMSG.pack(0, ifindex, handle, parent, info)


def dump_request(msg_type: int, ifindex: int = 0, parent: int = 0) -> bytes:
    return message(msg_type, NLM_F_REQUEST | NLM_F_DUMP, 0, tcmsg(ifindex, 0, parent))


def protocol_number(name: str) -> int:
    try:
        return ETHERTYPES[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r} ({', '.join(ETHERTYPES)})") from None


# ------------------------------------------------------------------ parsing


def attrs(buf, start: int, end: int):
    """(type, payload start, payload end) of each attribute in ``buf[start:end]``."""
    while start + 4 <= end:
        length, kind = NLATTR.unpack_from(buf, start)
        if length < 4:
            return
        yield kind & NLA_TYPE_MASK, start + 4, start + length
        start += (length + 3) & ~3


def attr_map(buf, start: int, end: int) -> dict:
    return {kind: (s, e) for kind, s, e in attrs(buf, start, end)}


def find(buf, s: int, e: int, want: int):
    """(payload start, end) of the first attribute of type ``want`` in ``buf[s:e]``, or None."""
    while s + 4 <= e:
        length, kind = NLATTR.unpack_from(buf, s)
        if length < 4:
            return None
        if kind & NLA_TYPE_MASK == want:
            return s + 4, s + length
        s += (length + 3) & ~3
    return None


def rebuild(buf, s: int, e: int, fix) -> bytes:
    """The attributes of ``buf[s:e]`` packed again, each as ``fix(type, payload)`` makes it:
    new payload bytes, or None to drop it (``type`` keeps its flag bits)."""
    out = []
    while s + 4 <= e:
        length, kind = NLATTR.unpack_from(buf, s)
        if length < 4:
            break
        payload = fix(kind, bytes(buf[s + 4:s + length]))
        if payload is not None:
            out.append(attr(kind, payload))
        s += (length + 3) & ~3
    return b"".join(out)


def cstr(buf, span) -> str:
    if span is None:
        return ""
    s, e = span
    return bytes(buf[s:e]).split(b"\0", 1)[0].decode("ascii", "replace")


def u32_at(buf, span) -> int:
    return U32.unpack_from(buf, span[0])[0]


def hexof(buf, s: int, e: int) -> str:
    return bytes(buf[s:e]).hex()


def header(buf, off: int):
    """(ifindex, handle, parent, info) of the tcmsg at ``off`` (the netlink message start)."""
    _, ifindex, handle, parent, info = TCMSG.unpack_from(buf, off + 16)
    return ifindex, handle, parent, info


def protocol_name(info: int) -> str:
    proto = htons(info & 0xFFFF)
    return PROTOCOL_NAMES.get(proto, f"0x{proto:04x}")
