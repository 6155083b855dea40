"""Reading traffic-control state back: root and ingress qdiscs, snapshots, u32 read-back, counters.

``Reader`` is the read half of the executor: it owns the namespace's netlink
channel and device lookups, and never changes anything.  A dump the kernel
flags as interrupted (a concurrent change) is read again.
"""

import errno as errnos
import functools
import gc

from ..errors import ConflictError, NotFoundError
from ..plan import INGRESS_HANDLE, U32Filter
from . import decode, replay
from .links import Links
from .nl import (RTM_GETQDISC, RTM_GETTCLASS, RTM_GETTFILTER, TC_H_CLSACT_EGRESS, TC_H_CLSACT_INGRESS,
                 TC_H_INGRESS, TC_H_ROOT, dump_request, header)
from .rates import clock
from .transport import Channel, DumpInterrupted, KernelError

DUMP_ATTEMPTS = 5


def without_gc(method):
    """Pause the cycle collector during ``method``: with a big plan in memory,
    every collection walks all its objects, and making thousands of rows or
    messages triggers many (stats for 65,536 flows: 0.9 s of it)."""
    @functools.wraps(method)
    def run(*args, **kw):
        was = gc.isenabled()
        gc.disable()
        try:
            return method(*args, **kw)
        finally:
            if was:
                gc.enable()
    return run


def consistent(method):
    """Run a reading method again when one of its dumps was interrupted."""
    @functools.wraps(method)
    def run(*args, **kw):
        for attempt in range(DUMP_ATTEMPTS):
            try:
                return method(*args, **kw)
            except DumpInterrupted:
                if attempt == DUMP_ATTEMPTS - 1:
                    raise ConflictError(f"netlink: traffic control kept changing while ratelimit read it "
                                        f"({DUMP_ATTEMPTS} dumps in a row were interrupted by other changes); "
                                        "try again when they stop") from None
    return run


class Reader:
    """Reads traffic-control state in one namespace."""

    def __init__(self, netns: str | None = None):
        self.netns = netns
        self.links = Links(netns)
        try:
            self.chan = Channel(netns)
        except BaseException:
            self.links.close()
            raise
        self.clock = clock()

    def close(self) -> None:
        if self.chan is not None:
            self.chan.close()
            self.links.close()
            self.chan = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def link_index(self, name: str) -> int | None:
        return self.links.index(name)

    def link_name(self, index: int) -> str | None:
        return self.links.name(index)

    def _device(self, dev: str) -> int:
        index = self.links.index(dev)
        if index is None:
            where = f" in namespace '{self.netns}'" if self.netns else ""
            raise NotFoundError(f"--interface: '{dev}' does not exist{where} (see: ip link)")
        return index

    def _dump(self, msg: bytes):
        return self.chan.dump(msg)

    @consistent
    def _qdisc_heads(self, index: int, parents=(TC_H_ROOT, TC_H_INGRESS)) -> list[tuple[int, int, str]]:
        """(parent, handle, kind) of the qdiscs on one device attached at ``parents`` (None: all)."""
        out = []
        for data, off, end in self._dump(dump_request(RTM_GETQDISC, index)):
            ifindex, handle, parent, _ = header(data, off)
            if ifindex == index and (parents is None or parent in parents):
                out.append((parent, handle, decode.qdisc_kind(data, off, end)))
        return out

    def root_qdisc(self, dev: str) -> tuple[str, int] | None:
        """(kind, handle) of ``dev``'s root qdisc; None for the kernel's default (handle 0)."""
        for parent, handle, kind in self._qdisc_heads(self._device(dev)):
            if parent == TC_H_ROOT:
                return None if handle == 0 else (kind, handle)
        return None

    def has_ingress(self, dev: str) -> bool:
        """True if ``dev`` has an ingress (or clsact) qdisc."""
        return any(parent == TC_H_INGRESS for parent, _, _ in self._qdisc_heads(self._device(dev)))

    @consistent
    def picture(self, devs, classes: bool = True) -> dict:
        """What ``devs`` hold at their root and ingress (``fingerprint``'s picture): per
        device None when it is missing, else its root qdisc (kind, handle) or None for
        the kernel's default, its ingress qdisc's kind or None, and (``classes``) every
        class as (classid, parent, kind)."""
        self.links.forget()
        out: dict = {}
        heads = None
        for dev in devs:
            index = self.links.index(dev)
            if index is None:
                out[dev] = None
                continue
            if heads is None:  # one qdisc dump for every device
                heads = [(header(d, o)[0], header(d, o)[2], header(d, o)[1], decode.qdisc_kind(d, o, e))
                         for d, o, e in self._dump(dump_request(RTM_GETQDISC))]
            seen = {"root": None, "ingress": None, "classes": None}
            for ifindex, parent, handle, kind in heads:
                if ifindex != index:
                    continue
                if parent == TC_H_ROOT and handle:
                    seen["root"] = (kind, handle)
                elif parent == TC_H_INGRESS:
                    seen["ingress"] = kind
            if classes:
                mine = [(handle, kind) for i, _parent, handle, kind in heads if i == index]
                seen["classes"] = [(header(d, o)[1], header(d, o)[2], decode.qdisc_kind(d, o, e))
                                   for d, o, e in self._classes(index, mine)]
            out[dev] = seen
        return out

    @without_gc
    @consistent
    def capture(self, parts: dict) -> dict:
        """The raw messages of ``parts`` ({dev: {"root", "ingress", "device"}}) for
        ``Executor.restore`` (see ``replay``): per device whether it exists, for "device"
        its kind and state, the messages of its root tree (unless the kernel's default)
        and ingress tree, and the snapshot items they decode to."""
        self.links.forget()
        out: dict = {}
        qdiscs = None
        for dev, want in parts.items():
            want = set(want)
            index = self.links.index(dev)
            if index is None:
                out[dev] = {"exists": False}
                continue
            if qdiscs is None:
                qdiscs = [(header(d, o)[0], d, o, e) for d, o, e in self._dump(dump_request(RTM_GETQDISC))]
            entry = out[dev] = {"exists": True, "parts": sorted(want), "messages": []}
            if "device" in want:
                entry["link"] = self.links.state(dev)
                want |= {"root", "ingress"}
            mine = [(d, o, e) for i, d, o, e in qdiscs if i == index]
            heads = {header(d, o)[2]: header(d, o)[1] for d, o, e in mine}
            msgs = entry["messages"]
            if "root" in want and heads.get(TC_H_ROOT):
                tree = [(d, o, e) for d, o, e in mine if header(d, o)[2] != TC_H_INGRESS]
                msgs += [replay.entry(replay.QDISC, header(d, o)[2], d, o, e) for d, o, e in tree]
                msgs += [replay.entry(replay.CLASS, header(d, o)[2], d, o, e)
                         for d, o, e in self._classes(index, [(header(d, o)[1], decode.qdisc_kind(d, o, e))
                                                              for d, o, e in tree])]
                for parent in _filter_parents([(header(d, o)[2], header(d, o)[1], decode.qdisc_kind(d, o, e))
                                               for d, o, e in tree]):
                    msgs += [replay.entry(replay.FILTER, parent, d, o, e)
                             for d, o, e in list(self._filters(index, parent))]
            if "ingress" in want and TC_H_INGRESS in heads:
                head = [(d, o, e) for d, o, e in mine if header(d, o)[2] == TC_H_INGRESS]
                msgs += [replay.entry(replay.QDISC, TC_H_INGRESS, d, o, e) for d, o, e in head]
                for parent in _filter_parents([(TC_H_INGRESS, header(d, o)[1], decode.qdisc_kind(d, o, e))
                                               for d, o, e in head]):
                    msgs += [replay.entry(replay.FILTER, parent, d, o, e)
                             for d, o, e in list(self._filters(index, parent))]
            entry["items"] = replay.items(msgs, self.link_name)
        return out

    def _filters(self, index: int, parent: int):
        try:
            yield from self._dump(dump_request(RTM_GETTFILTER, index, parent))
        except KernelError as e:
            if e.errno not in (errnos.EINVAL, errnos.ENOENT, errnos.EOPNOTSUPP):
                raise

    @without_gc
    @consistent
    def snapshot(self, devs) -> dict:
        """Every qdisc, class and filter on ``devs`` (static parts only); None for a missing device.

        Filters are read from every classful qdisc (and both clsact hooks), not
        from classes.  Counters, timestamps, netem's random seed and the
        kernel-chosen index of each action are left out.
        """
        self.links.forget()
        out: dict = {}
        qdiscs = None
        for dev in devs:
            index = self.links.index(dev)
            if index is None:
                out[dev] = None
                continue
            if qdiscs is None:
                qdiscs = [decode.qdisc_item(d, o, e) for d, o, e in self._dump(dump_request(RTM_GETQDISC))]
            mine = sorted((item for i, item in qdiscs if i == index), key=_order)
            classes = sorted((decode.class_item(d, o, e)[1] for d, o, e in self._classes(index, [q[2:4] for q in mine])),
                             key=_order)
            filters = []
            for parent in _filter_parents([(q[1], q[2], q[3]) for q in mine]):
                msgs = list(self._filters(index, parent))  # link_name asks the kernel too
                filters += [decode.filter_item(d, o, e, parent, self.link_name) for d, o, e in msgs]
            out[dev] = {"qdiscs": tuple(mine), "classes": tuple(classes), "filters": tuple(sorted(filters, key=_order))}
        return out

    def _classes(self, index: int, qdiscs):
        """Every class of a device's ``qdiscs`` ((handle, kind) pairs), one dump per classful
        qdisc: a device-wide class dump stops at the first netem qdisc on Linux 6.1
        (netem's class dump fails when it has no child), so the classes of qdiscs hashed
        after it would be missing."""
        for handle, kind in qdiscs:
            if handle and kind not in decode.CLASSLESS:
                yield from self._dump(dump_request(RTM_GETTCLASS, index, handle))

    @without_gc
    @consistent
    def read_back(self, dev: str) -> list:
        """The u32 tables and filters on ``dev`` (under every classful qdisc and ingress)
        as plan operations."""
        self.links.forget()
        index = self._device(dev)
        parents = []
        for parent, handle, kind in self._qdisc_heads(index, parents=None):
            if parent == TC_H_INGRESS and kind == "ingress":
                parents.append(INGRESS_HANDLE)
            elif handle and kind not in decode.CLASSLESS:
                parents.append(handle)
        out = []
        for parent in parents:
            for data, off, end in list(self._filters(index, parent)):  # link_name asks the kernel too
                op = decode.u32_op(data, off, end, dev, parent, self.clock, self.link_name)
                if op is not None:
                    out.append(op)
        return out

    @without_gc
    @consistent
    def stats(self, plan) -> list[dict]:
        """Counters of each of ``plan.flows``: one dump per (device, parent) in police mode,
        one class dump per device in shape mode."""
        self.links.forget()
        rows, by_filter, by_class = [], {}, {}
        where = None
        for flow in plan.flows:
            row = {"direction": flow.direction, "host": flow.host, "port": flow.port, "dev": flow.dev,
                   "bytes": 0, "packets": 0, "drops": 0, "overlimits": 0, "backlog_bytes": 0, "backlog_pkts": 0}
            rows.append(row)
            if flow.classid is not None:
                by_class.setdefault((flow.dev, flow.classid & 0xFFFF0000), {}).setdefault(flow.classid, []).append(row)
                continue
            if where is None:
                where = _leaf_parents(plan.ops)
            root, ingress = where.get((flow.dev, flow.prio, flow.handle), (None, False))
            # the same u32 handle can exist under both the root and the ingress qdisc of a device
            parent = INGRESS_HANDLE if root is None or (ingress and flow.direction == "source") else root
            by_filter.setdefault((flow.dev, parent), {}).setdefault((flow.prio, flow.handle), []).append(row)
        read = decode.action_counters()
        for (dev, parent), want in by_filter.items():
            index = self.links.index(dev)
            if index is None:
                continue
            for data, off, end in self._filters(index, parent):
                _, handle, _, info = header(data, off)
                hit = want.get((info >> 16, handle))
                if hit:
                    _fill(hit, read(data, off, end))
        read = decode.class_counters()
        for (dev, qdisc), want in by_class.items():  # a dump per qdisc: see _classes
            index = self.links.index(dev)
            if index is None:
                continue
            for data, off, end in self._dump(dump_request(RTM_GETTCLASS, index, qdisc)):
                hit = want.get(header(data, off)[1])
                if hit:
                    _fill(hit, read(data, off, end))
        return rows


def _filter_parents(qdiscs) -> list[int]:
    parents = []
    for parent, handle, kind in qdiscs:
        if kind == "clsact":
            parents += [TC_H_CLSACT_INGRESS, TC_H_CLSACT_EGRESS]
        elif handle and kind not in decode.CLASSLESS:
            parents.append(handle)
    return parents


def _order(item: tuple):
    return (item[1], item[2], repr(item))


def _fill(rows: list[dict], counters) -> None:
    if counters is None:
        return
    nbytes, packets, drops, overlimits, backlog, qlen = counters
    for row in rows:
        row.update(bytes=nbytes, packets=packets, drops=drops, overlimits=overlimits,
                   backlog_bytes=backlog, backlog_pkts=qlen)


def _leaf_parents(ops) -> dict:
    """(dev, prio, u32 handle) -> (its parent other than ingress or None, also under ingress?)."""
    out: dict = {}
    for op in ops:
        if type(op) is U32Filter and op.link is None:
            key = (op.dev, op.prio, op.handle)
            root, ingress = out.get(key, (None, False))
            if op.parent == INGRESS_HANDLE:
                ingress = True
            else:
                root = op.parent
            out[key] = (root, ingress)
    return out
