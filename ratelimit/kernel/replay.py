"""What ``--force`` replaces, kept as the kernel dumped it, and sent back as it was.

``Reader.capture`` reads the parts of devices ratelimit is about to replace -- a
device's root tree (its root qdisc, classes, leaf qdiscs and their filters), its
ingress tree, or an IFB device with both -- as the raw messages the kernel dumps,
with the snapshot items they decode to.  ``Executor.restore`` sends them back as
requests to create, parents before children, and compares what the kernel then
shows with the items captured: the interface is back exactly, or the caller learns
what is not.  This module is the pure part: which messages, in which order, as which
requests.  (HTB classes are re-created from their dumped parameters; a size table
with a data table, a policer's rate table or an eBPF program is not in a dump, so
such a tree is reported as not restored.)
"""

import json

from ..plan.ops import tc_handle
from . import decode
from .kinds import htb, u32
from .nl import (NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NLMSGHDR, TC_H_INGRESS, TC_H_ROOT, TCA_CHAIN, TCA_KIND,
                 TCA_OPTIONS, TCA_STAB, TCMSG, attr_map, cstr, header, rebuild)

QDISC, CLASS, FILTER = "qdisc", "class", "filter"
TCA_INGRESS_BLOCK, TCA_EGRESS_BLOCK = 13, 14
_KEPT = frozenset({TCA_KIND, TCA_OPTIONS, TCA_STAB, TCA_CHAIN, TCA_INGRESS_BLOCK, TCA_EGRESS_BLOCK})
# class kinds made by a request of their own; the others (tbf's, netem's, prio's...) come with their qdisc
MADE_CLASSES = frozenset({"htb", "hfsc", "drr", "qfq"})
# (what, kind) -> dumped options as a request carries them
_OPTIONS = {("filter", "u32"): u32.replayable, ("qdisc", "htb"): htb.replayable_qdisc}


def entry(tag: str, parent: int, buf, off: int, end: int) -> list:
    """One captured message, JSON-able: [tag, parent it was dumped under, hex]."""
    return [tag, parent, bytes(buf[off:end]).hex()]


def items(messages, names=None) -> list:
    """The snapshot items (``decode``) of captured messages, sorted and JSON-normalized, so
    a capture compares equal with a later one exactly when the kernel holds the same."""
    out = []
    for tag, parent, text in messages:
        raw = bytes.fromhex(text)
        if tag == QDISC:
            out.append(decode.qdisc_item(raw, 0, len(raw))[1])
        elif tag == CLASS:
            out.append(decode.class_item(raw, 0, len(raw))[1])
        else:
            out.append(decode.filter_item(raw, 0, len(raw), parent, names))
    return sorted(json.loads(json.dumps(out)), key=json.dumps)


def _kind(raw: bytes) -> str:
    return cstr(raw, attr_map(raw, 36, len(raw)).get(TCA_KIND))


def ordered(messages) -> list:
    """Captured messages in an order the kernel can create them in: the root and ingress
    qdiscs, then classes and leaf qdiscs each after its parent, then filters (u32 hash
    tables before the filters that link to them).  What can never be placed comes last,
    for the kernel to refuse."""
    qdiscs, classes, filters = [], [], []
    for m in messages:
        (qdiscs if m[0] == QDISC else classes if m[0] == CLASS else filters).append(m)
    first = [m for m in qdiscs if m[1] in (TC_H_ROOT, TC_H_INGRESS)]
    made_q = {header(bytes.fromhex(m[2]), 0)[1] >> 16: _kind(bytes.fromhex(m[2])) for m in first}
    made_c: set[int] = set()
    pending = [m for m in qdiscs if m not in first] + [m for m in classes if _kind(bytes.fromhex(m[2])) in MADE_CLASSES]
    out = list(first)
    while pending:
        placed = []
        for m in pending:
            raw = bytes.fromhex(m[2])
            _, handle, parent, _ = header(raw, 0)
            if m[0] == CLASS:
                ready = handle >> 16 in made_q and (parent == TC_H_ROOT or parent & 0xFFFF == 0 or parent in made_c)
            else:  # a leaf qdisc under a class: one made, or one that came with its qdisc
                owner = made_q.get(parent >> 16)
                ready = parent in made_c or (owner is not None and owner not in MADE_CLASSES)
            if ready:
                placed.append(m)
                if m[0] == CLASS:
                    made_c.add(handle)
                else:
                    made_q[handle >> 16] = _kind(raw)
        if not placed:
            break
        out += placed
        pending = [m for m in pending if m not in placed]
    out += pending
    return out + _filters_in_order(filters)


def _filters_in_order(filters) -> list:
    """u32 first makes a prio's root table itself (800:, 801: ... in the order prios are
    made, per qdisc), and a request for that table alone fails; so each prio is made by
    its first own table or root-table filter, prios in the order of their root tables,
    then the other tables, then the other filters.  The root tables are never sent."""
    def handle(m):
        return header(bytes.fromhex(m[2]), 0)[1]

    def prio(m):
        return (m[1], header(bytes.fromhex(m[2]), 0)[3] >> 16)
    roots = {prio(m): handle(m) >> 20 for m in filters if _is_table(m) and handle(m) >= 0x80000000}
    rest = [m for m in filters if not (_is_table(m) and handle(m) >= 0x80000000)]
    first = []
    for key in sorted(roots, key=lambda k: (k[0], roots[k])):
        mine = [m for m in rest if prio(m) == key]
        anchor = next((m for m in mine if _is_table(m)), None) or next(
            (m for m in mine if handle(m) >> 20 == roots[key]), None)
        if anchor is not None:
            first.append(anchor)
    rest = [m for m in rest if m not in first]
    return first + [m for m in rest if _is_table(m)] + [m for m in rest if not _is_table(m)]


def _is_table(m) -> bool:
    raw = bytes.fromhex(m[2])
    if _kind(raw) != "u32":
        return False
    handle = header(raw, 0)[1]
    span = attr_map(raw, 36, len(raw)).get(TCA_OPTIONS)
    return handle & 0xFFF == 0 and span is not None and u32.TCA_U32_DIVISOR in attr_map(raw, *span)


def request(m, ifindex: int) -> bytes:
    """The request that creates what captured message ``m`` describes, on device ``ifindex``."""
    raw = bytes.fromhex(m[2])
    _, kind_type, _, _, _ = NLMSGHDR.unpack_from(raw, 0)
    family, _, handle, parent, info = TCMSG.unpack_from(raw, 16)
    if m[0] != FILTER:
        info = 0  # a dump's refcount (qdisc) or leaf (class), not a request's
    else:
        parent = m[1]
    kind = _kind(raw)
    fix_options = _OPTIONS.get((m[0], kind))

    def keep(attr_type, payload):
        if attr_type & 0x3FFF not in _KEPT:
            return None
        if attr_type & 0x3FFF == TCA_OPTIONS and fix_options is not None:
            return fix_options(payload)
        return payload
    body = TCMSG.pack(family, ifindex, handle, parent, info) + rebuild(raw, 36, len(raw), keep)
    return NLMSGHDR.pack(16 + len(body), kind_type, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL, 0, 0) + body


def what(m) -> str:
    """A captured message in a few words, for messages to the user."""
    raw = bytes.fromhex(m[2])
    _, handle, parent, _ = header(raw, 0)
    parent = parent if m[0] != FILTER else m[1]
    where = {TC_H_ROOT: "root", TC_H_INGRESS: "ingress"}.get(parent) or f"parent {tc_handle(parent)}"
    return f"{m[0]} {_kind(raw)} {tc_handle(handle) if m[0] != FILTER else hex(handle)} {where}"
