"""Netlink message packing for the executor: plan operations in, bytes out.

Pure: no sockets, no I/O except reading ``/proc/net/psched`` once for the tick
length.  Every message is what ``tc``/``ip`` (iproute2 6.1) sends for the same
operation's text (``op.tc()``), attribute for attribute, so the kernel ends up
in the same state; the tests compare against ``tc``'s own bytes.  Where we
differ on purpose:

- HTB classes are sent without the two 1 KiB rate tables (``TCA_HTB_RTAB`` /
  ``CTAB``): a kernel only reads them when the rate spec's link layer is
  unknown, and ours names Ethernet, as tc's does, so the state is the same.
  ``htb_tables=True`` adds them back.  Police keeps its rate table: the kernel
  requires it.
- Where tc 6.1 cannot say what the operation asks, we say it: a netem
  duplicate correlation is sent even when it is the only correlation (tc
  drops it then), and delays beyond tc's 32-bit tick range (about 274 s,
  which tc refuses) go in ``TCA_NETEM_LATENCY64``/``JITTER64``.

Layout reminders: a message is ``nlmsghdr`` (16 bytes) + ``tcmsg`` (20) +
attributes (``len``, ``type``, payload padded to 4).  Handles are ints
(``0x520000`` is ``52:``); u32 handles are ``ht:bucket:node`` = 12:8:12 bits.
"""

import struct
import sys

# ------------------------------------------------------------------ constants

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK = 0x1, 0x2, 0x4
NLM_F_DUMP = 0x300
NLM_F_EXCL, NLM_F_CREATE = 0x200, 0x400
NLM_F_DUMP_INTR = 0x10
NLM_F_ACK_TLVS = 0x200  # in an NLMSG_ERROR: extended-ack attributes follow
NLMSGERR_ATTR_MSG = 1

ADD_FLAGS = NLM_F_REQUEST | NLM_F_EXCL | NLM_F_CREATE  # what "tc ... add" sends (plus ACK)

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NEWTFILTER, RTM_DELTFILTER, RTM_GETTFILTER = 44, 45, 46

IFLA_IFNAME, IFLA_LINKINFO, IFLA_INFO_KIND = 3, 18, 1
IFF_UP = 0x1

NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
TC_H_CLSACT_INGRESS, TC_H_CLSACT_EGRESS = 0xFFFFFFF2, 0xFFFFFFF3

TCA_KIND, TCA_OPTIONS, TCA_STATS, TCA_XSTATS, TCA_RATE, TCA_FCNT, TCA_STATS2 = 1, 2, 3, 4, 5, 6, 7
TCA_STAB, TCA_PAD, TCA_DUMP_INVISIBLE, TCA_CHAIN = 8, 9, 10, 11

TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_CTAB, TCA_HTB_RTAB = 1, 2, 3, 4
TCA_HTB_DIRECT_QLEN, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 5, 6, 7

TCA_NETEM_CORR, TCA_NETEM_REORDER, TCA_NETEM_CORRUPT = 1, 3, 4
TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64, TCA_NETEM_PRNG_SEED, TCA_NETEM_PAD = 10, 11, 14, 9

TCA_U32_CLASSID, TCA_U32_HASH, TCA_U32_LINK, TCA_U32_DIVISOR = 1, 2, 3, 4
TCA_U32_SEL, TCA_U32_POLICE, TCA_U32_ACT, TCA_U32_PCNT = 5, 6, 7, 9
TC_U32_TERMINAL = 1

TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_ACT_INDEX, TCA_ACT_STATS, TCA_ACT_PAD = 1, 2, 3, 4, 5
TCA_POLICE_TBF, TCA_POLICE_RATE, TCA_POLICE_RESULT, TCA_POLICE_TM = 1, 2, 5, 6
TCA_POLICE_PAD, TCA_POLICE_RATE64 = 7, 8
TCA_MIRRED_TM, TCA_MIRRED_PARMS, TCA_MIRRED_PAD = 1, 2, 3

TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8

TC_ACT_OK, TC_ACT_SHOT, TC_ACT_STOLEN = 0, 2, 4
TCA_EGRESS_REDIR = 1
LINKLAYER_ETHERNET = 1
TIME_UNITS_PER_SEC = 1000000
HTB_DEFAULT_MTU = 1600  # tc's default when a class gives no "mtu"
U32_MAX = 0xFFFFFFFF

ETHERTYPES = {"all": 0x0003, "ip": 0x0800, "ipv6": 0x86DD, "arp": 0x0806, "802.1q": 0x8100}
PROTOCOL_NAMES = {v: k for k, v in ETHERTYPES.items()}

# ------------------------------------------------------------------ structs

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
NLATTR = struct.Struct("=HH")
U32 = struct.Struct("=I")
U64 = struct.Struct("=Q")
RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate
HTB_OPT = struct.Struct("=12s12sIIIII")  # rate, ceil, buffer, cbuffer, quantum, level, prio
HTB_GLOB = struct.Struct("=IIIII")  # version, rate2quantum, defcls, debug, direct_pkts
POLICE = struct.Struct("=IiIII12s12siiI")  # index action limit burst mtu rate peak refcnt bindcnt capab
MIRRED = struct.Struct("=IIiiiiI")  # index capab action refcnt bindcnt eaction ifindex
NETEM_QOPT = struct.Struct("=IIIIII")  # latency limit loss gap duplicate jitter
U32_SEL = struct.Struct("=BBBxHHhhI")  # flags offshift nkeys offmask off offoff hoff hmask(be)
U32_KEY_BE = struct.Struct(">II")  # mask, val (both big-endian)
U32_KEY_OFF = struct.Struct("=ii")  # off, offmask


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


_KIND_U32 = attr_str(TCA_KIND, "u32")


def protocol_number(name: str) -> int:
    try:
        return ETHERTYPES[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r} ({', '.join(ETHERTYPES)})") from None


# ------------------------------------------------------------------ time and rates, as tc computes them


class Clock:
    """The packet scheduler's tick, from ``/proc/net/psched`` (tc_core.c's tc_core_init)."""

    def __init__(self, psched: str | None = None):
        if psched is None:
            with open("/proc/net/psched") as f:
                psched = f.read()
        t2us, us2t, clock_res = (int(w, 16) for w in psched.split()[:3])
        if clock_res == 1_000_000_000:
            t2us = us2t
        self.tick_in_usec = t2us / us2t * (clock_res / TIME_UNITS_PER_SEC)

    def time2tick(self, time_us: int) -> int:
        return min(int(time_us * self.tick_in_usec), U32_MAX)

    def tick2time(self, ticks: int) -> float:
        return ticks / self.tick_in_usec

    def xmittime(self, rate_bytes: int, size: int) -> int:
        """Ticks to send ``size`` bytes at ``rate_bytes``/s: whole microseconds first, as tc does."""
        time_us = min(int(TIME_UNITS_PER_SEC * (size / rate_bytes)), U32_MAX)
        return self.time2tick(time_us)

    def size_of(self, rate_bytes: int, ticks: int) -> int:
        """The smallest size whose xmittime is ``ticks``: the inverse of a lossy
        map, exact for the bursts plans make (whole microseconds of the rate)."""
        time_us = max(0, int(ticks / self.tick_in_usec) - 1)
        while self.time2tick(time_us) < ticks and time_us < U32_MAX:
            time_us += 1
        size = max(0, int(time_us * rate_bytes / TIME_UNITS_PER_SEC) - 2)
        while int(TIME_UNITS_PER_SEC * (size / rate_bytes)) < time_us:
            size += 1
        return size


_CLOCK: Clock | None = None


def clock() -> Clock:
    global _CLOCK
    if _CLOCK is None:
        _CLOCK = Clock()
    return _CLOCK


def rate_bytes(rate_bps: int) -> int:
    """tc's get_rate64: bits/s to bytes/s, truncated."""
    return int(rate_bps / 8) if rate_bps < 2**53 else rate_bps // 8


def cell_log_for(mtu: int) -> int:
    mtu = mtu or 2047
    cell_log = 0
    while (mtu >> cell_log) > 255:
        cell_log += 1
    return cell_log


def ratespec(rate_b: int, mtu: int, mpu: int) -> bytes:
    return RATESPEC.pack(cell_log_for(mtu), LINKLAYER_ETHERNET, 0, -1, mpu, min(rate_b, U32_MAX))


def rate_table(rate_b: int, mtu: int, mpu: int, clk: Clock) -> bytes:
    """tc_calc_rtable: 256 transmit times, for sizes (i + 1) << cell_log (at least mpu)."""
    cell_log = cell_log_for(mtu)
    return struct.pack("=256I", *(clk.xmittime(rate_b, max((i + 1) << cell_log, mpu)) for i in range(256)))


def percent(pct: float) -> int:
    """tc's get_percent: a share of 2**32 - 1, rounded half to even like rint()."""
    return round(pct / 100.0 * 4294967295.0)


# ------------------------------------------------------------------ the encoder


class Encoder:
    """Packs plan operations as netlink messages for one namespace.

    ``ifindex(name)`` resolves device names (raising for unknown ones); the
    caches below make identical police actions, rate specs and tcmsg headers
    cost one dictionary lookup after the first.
    """

    def __init__(self, ifindex, clk: Clock | None = None, htb_tables: bool = False):
        self.ifindex = ifindex
        self.clock = clk or clock()
        self.htb_tables = htb_tables
        self._act: dict = {}
        self._htb: dict = {}
        self._head: dict = {}
        self._hash: dict = {}
        self._off: dict = {}

    # -- links (ip link)

    def add_ifb(self, name: str, seq: int, flags: int) -> bytes:
        body = (IFINFOMSG.pack(0, 0, 0, 0, 0) + attr_str(IFLA_IFNAME, name)
                + nest(IFLA_LINKINFO, attr_str(IFLA_INFO_KIND, "ifb")))
        return message(RTM_NEWLINK, flags | NLM_F_CREATE | NLM_F_EXCL, seq, body)

    def link_up(self, index: int, seq: int, flags: int) -> bytes:
        return message(RTM_NEWLINK, flags, seq, IFINFOMSG.pack(0, 0, index, IFF_UP, IFF_UP))

    def del_link(self, name: str, seq: int, flags: int) -> bytes:
        return message(RTM_DELLINK, flags, seq, IFINFOMSG.pack(0, 0, 0, 0, 0) + attr_str(IFLA_IFNAME, name))

    # -- qdiscs

    def htb_qdisc(self, op, seq: int, flags: int) -> bytes:
        opts = nest(TCA_OPTIONS, attr(TCA_HTB_INIT, HTB_GLOB.pack(3, 10, op.default_minor, 0, 0)))
        body = tcmsg(self.ifindex(op.dev), op.handle, TC_H_ROOT) + attr_str(TCA_KIND, "htb") + opts
        return message(RTM_NEWQDISC, flags | NLM_F_CREATE | NLM_F_EXCL, seq, body)

    def ingress_qdisc(self, op, seq: int, flags: int) -> bytes:
        body = tcmsg(self.ifindex(op.dev), 0xFFFF0000, TC_H_INGRESS) + attr_str(TCA_KIND, "ingress")
        return message(RTM_NEWQDISC, flags | NLM_F_CREATE | NLM_F_EXCL, seq, body)

    def del_qdisc(self, op, seq: int, flags: int) -> bytes:
        if op.parent == TC_H_INGRESS:  # tc names the kind and handle for "del ... ingress"
            body = tcmsg(self.ifindex(op.dev), 0xFFFF0000, TC_H_INGRESS) + attr_str(TCA_KIND, "ingress")
        else:
            body = tcmsg(self.ifindex(op.dev), 0, op.parent)
        return message(RTM_DELQDISC, flags, seq, body)

    def netem_qdisc(self, op, seq: int, flags: int) -> bytes:
        body = (tcmsg(self.ifindex(op.dev), op.handle, op.parent) + attr_str(TCA_KIND, "netem")
                + self.netem_options(op.netem))
        return message(RTM_NEWQDISC, flags | NLM_F_CREATE | NLM_F_EXCL, seq, body)

    def netem_options(self, n) -> bytes:
        """TCA_OPTIONS of netem: struct tc_netem_qopt, then attributes (not a nest)."""
        clk = self.clock
        delayed = bool(n.delay_us or n.jitter_us)
        latency_us = n.delay_us if delayed else 0
        jitter_us = n.jitter_us if delayed else 0
        delay_corr = n.delay_corr_pct if jitter_us else 0.0
        pick = lambda pct, corr: (pct, corr if pct else 0.0)  # noqa: E731 - tc ignores a lone correlation
        loss, loss_corr = pick(n.loss_pct, n.loss_corr_pct)
        dup, dup_corr = pick(n.duplicate_pct, n.duplicate_corr_pct)
        corrupt, corrupt_corr = pick(n.corrupt_pct, n.corrupt_corr_pct)
        reorder, reorder_corr = pick(n.reorder_pct, n.reorder_corr_pct)
        wide = latency_us * clk.tick_in_usec > U32_MAX or jitter_us * clk.tick_in_usec > U32_MAX
        qopt = NETEM_QOPT.pack(clk.time2tick(latency_us), n.limit_pkts, percent(loss),
                               1 if reorder else 0, percent(dup), clk.time2tick(jitter_us))
        extra = []
        if delay_corr or loss_corr or dup_corr or reorder_corr or corrupt_corr:
            extra.append(attr(TCA_NETEM_CORR, struct.pack("=III", percent(delay_corr), percent(loss_corr),
                                                          percent(dup_corr))))
        if reorder:
            extra.append(attr(TCA_NETEM_REORDER, struct.pack("=II", percent(reorder), percent(reorder_corr))))
        if corrupt:
            extra.append(attr(TCA_NETEM_CORRUPT, struct.pack("=II", percent(corrupt), percent(corrupt_corr))))
        if wide:
            extra.append(attr(TCA_NETEM_LATENCY64, struct.pack("=q", latency_us * 1000)))
            extra.append(attr(TCA_NETEM_JITTER64, struct.pack("=q", jitter_us * 1000)))
        return attr(TCA_OPTIONS, qopt + b"".join(extra))

    # -- classes

    def htb_class(self, op, seq: int, flags: int) -> bytes:
        key = (op.rate_bps, op.ceil_bps, op.burst_bytes, op.quantum_bytes, op.mpu_bytes)
        opts = self._htb.get(key)
        if opts is None:
            opts = self._htb[key] = self._htb_options(*key)
        body = tcmsg(self.ifindex(op.dev), op.classid, op.parent) + opts
        return message(RTM_NEWTCLASS, flags | NLM_F_CREATE | NLM_F_EXCL, seq, body)

    def _htb_options(self, rate_bps, ceil_bps, burst, quantum, mpu) -> bytes:
        clk = self.clock
        rate, ceil = rate_bytes(rate_bps), rate_bytes(ceil_bps)
        parms = HTB_OPT.pack(ratespec(rate, HTB_DEFAULT_MTU, mpu), ratespec(ceil, HTB_DEFAULT_MTU, mpu),
                             clk.xmittime(rate, burst), clk.xmittime(ceil, burst), quantum, 0, 0)
        parts = []
        if rate > U32_MAX:
            parts.append(attr(TCA_HTB_RATE64, U64.pack(rate)))
        if ceil > U32_MAX:
            parts.append(attr(TCA_HTB_CEIL64, U64.pack(ceil)))
        parts.append(attr(TCA_HTB_PARMS, parms))
        if self.htb_tables:
            parts.append(attr(TCA_HTB_RTAB, rate_table(min(rate, U32_MAX), HTB_DEFAULT_MTU, mpu, clk)))
            parts.append(attr(TCA_HTB_CTAB, rate_table(min(ceil, U32_MAX), HTB_DEFAULT_MTU, mpu, clk)))
        return attr_str(TCA_KIND, "htb") + nest(TCA_OPTIONS, *parts)

    # -- u32 filters

    def _filter_head(self, dev, parent, prio, protocol) -> tuple:
        key = (dev, parent, prio, protocol)
        head = self._head.get(key)
        if head is None:
            head = self._head[key] = (self.ifindex(dev), parent, (prio << 16) | htons(protocol_number(protocol)))
        return head

    def u32_table(self, op, seq: int, flags: int) -> bytes:
        ifindex, parent, info = self._filter_head(op.dev, op.parent, op.prio, op.protocol)
        body = (TCMSG.pack(0, ifindex, op.ht << 20, parent, info) + attr_str(TCA_KIND, "u32")
                + nest(TCA_OPTIONS, attr_u32(TCA_U32_DIVISOR, op.divisor)))
        return message(RTM_NEWTFILTER, flags | NLM_F_CREATE | NLM_F_EXCL, seq, body)

    def _actions(self, police, redirect) -> bytes:
        key = (police, redirect)
        act = self._act.get(key)
        if act is None:
            acts = []
            if police is not None:
                acts.append(self.police_action(police))
            if redirect is not None:
                acts.append(self.mirred_action(redirect))
            prios = (nest(i, a) for i, a in enumerate(acts, start=1))
            act = self._act[key] = nest(TCA_U32_ACT, *prios) if acts else b""
        return act

    def police_action(self, p) -> bytes:
        """``action police rate R burst B mtu M [mpu P] conform-exceed drop/ok``."""
        clk = self.clock
        rate = rate_bytes(p.rate_bps)
        tbf = POLICE.pack(0, TC_ACT_SHOT, 0, clk.xmittime(rate, p.burst_bytes), p.mtu_bytes,
                          ratespec(rate, p.mtu_bytes, p.mpu_bytes), bytes(12), 0, 0, 0)
        parts = [attr(TCA_POLICE_TBF, tbf), attr(TCA_POLICE_RATE, rate_table(rate, p.mtu_bytes, p.mpu_bytes, clk))]
        if rate > U32_MAX:
            parts.append(attr(TCA_POLICE_RATE64, U64.pack(rate)))
        return attr_str(TCA_ACT_KIND, "police") + nest(TCA_ACT_OPTIONS | NLA_F_NESTED, *parts)

    def mirred_action(self, dev: str) -> bytes:
        """``action mirred egress redirect dev DEV``."""
        parms = MIRRED.pack(0, 0, TC_ACT_STOLEN, 0, 0, TCA_EGRESS_REDIR, self.ifindex(dev))
        return attr_str(TCA_ACT_KIND, "mirred") + nest(TCA_ACT_OPTIONS | NLA_F_NESTED, attr(TCA_MIRRED_PARMS, parms))

    def u32_filter(self, op, seq: int, flags: int) -> bytes:
        ifindex, parent, info = self._filter_head(op.dev, op.parent, op.prio, op.protocol)
        parts = []
        if op.link is not None:
            parts.append(attr_u32(TCA_U32_LINK, op.link << 20))
        if op.classid is not None:
            parts.append(attr_u32(TCA_U32_CLASSID, op.classid))
        if op.police is not None or op.redirect is not None:
            parts.append(self._actions(op.police, op.redirect))
        if op.ht:
            parts.append(attr_u32(TCA_U32_HASH, (op.ht << 20) | (op.bucket << 12)))
        parts.append(self._selector(op))
        opts = b"".join(parts)
        body = (TCMSG.pack(0, ifindex, op.handle, parent, info) + _KIND_U32
                + NLATTR.pack(4 + len(opts), TCA_OPTIONS) + opts)
        return NLMSGHDR.pack(16 + len(body), RTM_NEWTFILTER, flags | NLM_F_CREATE | NLM_F_EXCL, seq, 0) + body

    def _selector(self, op) -> bytes:
        keys = op.keys
        if len({k.off for k in keys}) != len(keys):
            keys = merge_keys(keys)
        offs = self._off
        packed = []
        for k in keys:
            ob = offs.get(k.off)
            if ob is None:
                ob = offs[k.off] = U32_KEY_OFF.pack(k.off, 0)
            packed.append(U32_KEY_BE.pack(k.mask, k.value & k.mask) + ob)
        terminal = TC_U32_TERMINAL if (op.classid is not None or op.police is not None or op.redirect) else 0
        hk = op.hashkey
        head = self._hash.get((terminal, len(keys), hk))
        if head is None:
            mask, off = (hk.mask, hk.off) if hk else (0, 0)
            head = U32_SEL.pack(terminal, 0, len(keys), 0, 0, 0, off, be32(mask))
            self._hash[(terminal, len(keys), hk)] = head
        sel = head + b"".join(packed)
        return NLATTR.pack(4 + len(sel), TCA_U32_SEL) + sel

    # -- dumps

    def dump_request(self, msg_type: int, seq: int, ifindex: int = 0, parent: int = 0) -> bytes:
        return message(msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, tcmsg(ifindex, 0, parent))


def merge_keys(keys) -> tuple:
    """tc's pack_key: keys at the same offset become one key (values and masks or-ed)."""
    from .plan import Key
    merged: dict[int, list[int]] = {}
    for k in keys:
        value, mask = k.value & k.mask, k.mask
        if k.off in merged:
            old = merged[k.off]
            if (old[0] ^ value) & old[1] & mask:
                raise ValueError(f"u32 keys at offset {k.off} contradict each other")
            old[0] |= value
            old[1] |= mask
        else:
            merged[k.off] = [value, mask]
    return tuple(Key(v, m, off) for off, (v, m) in merged.items())


def getlink_request(seq: int, name: str | None = None, index: int = 0) -> bytes:
    body = IFINFOMSG.pack(0, 0, index, 0, 0) + (attr_str(IFLA_IFNAME, name) if name else b"")
    return message(RTM_GETLINK, NLM_F_REQUEST, seq, body)
