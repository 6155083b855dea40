"""netem: delay, jitter and the random impairments, as ``tc qdisc ... netem`` sends them."""

import struct

from ...plan.shaping import netem_groups
from .. import distfile
from ..nl import NLA_F_NESTED, TCA_KIND, TCA_OPTIONS, U32_MAX, attr, attr_str, attrs, hexof
from ..rates import Clock, percent

TCA_NETEM_CORR, TCA_NETEM_REORDER, TCA_NETEM_CORRUPT, TCA_NETEM_LOSS, TCA_NETEM_RATE = 1, 3, 4, 5, 6
TCA_NETEM_RATE64, TCA_NETEM_SLOT, TCA_NETEM_SLOT_DIST = 8, 12, 13  # linux/pkt_sched.h
NETEM_SLOT = struct.Struct("=qqiiqq")  # min and max delay (ns), max packets, max bytes, distribution delay, jitter
NETEM_LOSS_GI, NETEM_LOSS_GE = 1, 2  # in TCA_NETEM_LOSS: struct tc_netem_gimodel, tc_netem_gemodel
TCA_NETEM_PAD, TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64, TCA_NETEM_PRNG_SEED = 9, 10, 11, 14
NETEM_RATE = struct.Struct("=IiIi")  # rate (bytes/s), packet_overhead, cell_size, cell_overhead
NETEM_QOPT = struct.Struct("=IIIIII")  # latency limit loss gap duplicate jitter

KIND = attr_str(TCA_KIND, "netem")


def options(n, limit_pkts: int, clk: Clock, rate_bps: int = 0, cells: tuple = (0, 0, 0)) -> bytes:
    """TCA_KIND + TCA_OPTIONS of netem for link parameters ``n``: struct
    tc_netem_qopt, then attributes (not a nest).  Where tc 6.1 cannot say what
    is asked, we say it: a duplicate correlation is sent even when it is the only
    correlation, and delays beyond tc's 32-bit tick range (about 274 s) go in
    TCA_NETEM_LATENCY64/JITTER64.  ``rate_bps`` serializes packets at that rate, each
    counted with ``cells``: (packet overhead, cell size, cell overhead) as tc's
    ``rate RATE OVERHEAD CELLSIZE CELLOVERHEAD``.  A slot drawn from a table sends the table
    last, as tc does (``distfile.table``: read from disk, the FieldError of a missing one)."""
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
    qopt = NETEM_QOPT.pack(clk.time2tick(latency_us), limit_pkts, percent(loss),
                           1 if reorder else 0, percent(dup), clk.time2tick(jitter_us))
    extra = []
    groups = netem_groups(n, rate_bps)
    if "corr" in groups:
        extra.append(attr(TCA_NETEM_CORR, struct.pack("=III", percent(delay_corr), percent(loss_corr),
                                                      percent(dup_corr))))
    if "reorder" in groups:
        extra.append(attr(TCA_NETEM_REORDER, struct.pack("=II", percent(reorder), percent(reorder_corr))))
    if "corrupt" in groups:
        extra.append(attr(TCA_NETEM_CORRUPT, struct.pack("=II", percent(corrupt), percent(corrupt_corr))))
    if "slot" in groups:
        s = n.slot
        extra.append(attr(TCA_NETEM_SLOT, NETEM_SLOT.pack(s.min_us * 1000, s.max_us * 1000, s.packets, s.bytes_,
                                                          s.dist_delay_us * 1000, s.dist_jitter_us * 1000)))
    if n.loss_model is not None:
        extra.append(attr(TCA_NETEM_LOSS | NLA_F_NESTED, loss_model(n.loss_model)))
    if "rate" in groups:
        rate = rate_bps // 8  # tc's get_rate64
        if rate >= 1 << 32:
            extra.append(attr(TCA_NETEM_RATE64, struct.pack("=Q", rate)))
        extra.append(attr(TCA_NETEM_RATE, NETEM_RATE.pack(min(rate, U32_MAX), *cells)))
    if "slot_dist" in groups:
        extra.append(attr(TCA_NETEM_SLOT_DIST, distfile.table(n.slot.dist)))
    if wide:
        extra.append(attr(TCA_NETEM_LATENCY64, struct.pack("=q", latency_us * 1000)))
        extra.append(attr(TCA_NETEM_JITTER64, struct.pack("=q", jitter_us * 1000)))
    return KIND + attr(TCA_OPTIONS, qopt + b"".join(extra))


def loss_model(m) -> bytes:
    """The attribute in TCA_NETEM_LOSS for ``m`` (a ``LossModel``), as tc sends it: the
    4-state model's five in the kernel's order (p13 p31 p32 p14 p23); the Gilbert-Elliott
    model's p, r, h (what gets through in the bad state: tc takes 1-h and sends its
    complement) and k1 (the loss in the good state, 1-k)."""
    v = m.params()
    if m.model == "state":
        return attr(NETEM_LOSS_GI, struct.pack("=5I", *(percent(v[k]) for k in ("p13", "p31", "p32", "p14", "p23"))))
    return attr(NETEM_LOSS_GE, struct.pack("=4I", percent(v["p"]), percent(v["r"]),
                                           U32_MAX - percent(100 - v["h"]), percent(100 - v["k"])))


def decode(buf, s, e) -> tuple:
    if e - s < NETEM_QOPT.size:
        return (("raw", hexof(buf, s, e)),)
    latency, limit, loss, gap, duplicate, jitter = NETEM_QOPT.unpack_from(buf, s)
    out = [("qopt", "latency", latency, "limit", limit, "loss", loss, "gap", gap,
            "duplicate", duplicate, "jitter", jitter)]
    for kind, ps, pe in attrs(buf, s + NETEM_QOPT.size, e):
        if kind not in (TCA_NETEM_PRNG_SEED, TCA_NETEM_PAD):  # the seed is random unless set
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)
