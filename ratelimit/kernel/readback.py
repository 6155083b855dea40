"""Reading traffic-control state back: root and ingress qdiscs, snapshots, u32 read-back, counters.

``Reader`` is the read half of the executor: it owns the namespace's netlink
channel and device lookups, and never changes anything.  A dump the kernel
flags as interrupted (a concurrent change) is read again.
"""

import errno as errnos
import functools
import gc

from ..errors import ConflictError, NotFoundError
from ..plan.ops import INGRESS_HANDLE
from ..plan.queuepin import PROGRAM_NAME
from . import decode, offload, replay
from .counters import COLUMNS, FlowTable, read_classes, read_filters
from .kinds import bpf
from .links import Links
from .netns import in_netns
from .nl import (NLM_F_REQUEST, RTM_GETQDISC, RTM_GETTCLASS, RTM_GETTFILTER, TC_H_CLSACT_EGRESS, TC_H_CLSACT_INGRESS,
                 TC_H_INGRESS, TC_H_ROOT, TCA_KIND, TCA_OPTIONS, attr_map, cstr, dump_request, header, message, tcmsg)
from .rates import clock
from .transport import Channel, DumpInterrupted, KernelError

DUMP_ATTEMPTS = 5
_NO_FILTERS = frozenset({errnos.EINVAL, errnos.ENOENT, errnos.EOPNOTSUPP})  # no such parent


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
        self.chan = Channel(netns)
        try:
            self.links = Links(netns, self.chan)
        except BaseException:
            self.chan.close()
            raise
        self.clock = clock()
        self._layouts = ({}, {})  # what counters learnt of class and filter messages, per length

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

    def merging(self) -> list[tuple[str, tuple[str, ...]]]:
        """The namespace's devices that merge received frames (``offload.merging``)."""
        devices = self.links.receiving()
        if self.netns is None:
            return offload.merging(devices)
        return in_netns(self.netns, offload.merging, devices)

    def _device(self, dev: str) -> int:
        index = self.links.index(dev)
        if index is None:
            where = f" in namespace '{self.netns}'" if self.netns else ""
            raise NotFoundError(f"--interface: '{dev}' does not exist{where} (see: ip link)")
        return index

    def _present(self, devs):
        """(name, index) of each of ``devs`` that exists, in order, looked up afresh
        (``links.forget``): the devices a reading method describes."""
        self.links.forget()
        for dev in devs:
            index = self.links.index(dev)
            if index is not None:
                yield dev, index

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

    def _qdisc_at(self, index: int, parent: int) -> tuple[int, str] | None:
        """(handle, kind) of the qdisc attached at ``parent`` (root or ingress) of a device,
        asked for alone: a dump would list every qdisc of the namespace (65,536 leaves)."""
        try:
            found = self.chan.query(message(RTM_GETQDISC, NLM_F_REQUEST, 0, tcmsg(index, 0, parent)))
        except KernelError as e:
            if e.errno in (errnos.ENOENT, errnos.EINVAL):
                return None
            raise
        if found is None:
            return None
        return header(found[0], found[1])[1], decode.qdisc_kind(*found)

    def _root_at(self, index: int) -> tuple[str, int] | None:
        found = self._qdisc_at(index, TC_H_ROOT)
        return None if found is None or found[0] == 0 else (found[1], found[0])

    def root_qdisc(self, dev: str) -> tuple[str, int] | None:
        """(kind, handle) of ``dev``'s root qdisc; None for the kernel's default (handle 0)."""
        return self._root_at(self._device(dev))

    def has_ingress(self, dev: str) -> bool:
        """True if ``dev`` has an ingress (or clsact) qdisc."""
        return self._qdisc_at(self._device(dev), TC_H_INGRESS) is not None

    @consistent
    def picture(self, devs, classes: bool = True) -> dict:
        """What ``devs`` hold at their root and ingress (``fingerprint``'s picture): per
        device None when it is missing, else its root qdisc (kind, handle) or None for
        the kernel's default, its ingress qdisc's kind or None, and (``classes``) every
        class as (classid, parent, kind)."""
        out: dict = dict.fromkeys(devs)  # None: the device is missing
        heads = None
        for dev, index in self._present(devs):
            seen = {"root": None, "ingress": None, "classes": None}
            if not classes:  # the root and ingress qdiscs asked for alone (no dump of every leaf)
                seen["root"], ingress = self._root_at(index), self._qdisc_at(index, TC_H_INGRESS)
                if ingress is not None:
                    seen["ingress"] = ingress[1]
                out[dev] = seen
                continue
            if heads is None:  # one qdisc dump for every device
                heads = [(header(d, o)[0], header(d, o)[2], header(d, o)[1], decode.qdisc_kind(d, o, e))
                         for d, o, e in self._dump(dump_request(RTM_GETQDISC))]
            for ifindex, parent, handle, kind in heads:
                if ifindex != index:
                    continue
                if parent == TC_H_ROOT and handle:
                    seen["root"] = (kind, handle)
                elif parent == TC_H_INGRESS:
                    seen["ingress"] = kind
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
        out: dict = {dev: {"exists": False} for dev in parts}
        qdiscs = None
        for dev, index in self._present(parts):
            want = set(parts[dev])
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
            if e.errno not in _NO_FILTERS:
                raise

    def _filter_chunks(self, index: int, parent: int):
        try:
            yield from self.chan.dump_chunks(dump_request(RTM_GETTFILTER, index, parent))
        except KernelError as e:
            if e.errno not in _NO_FILTERS:
                raise

    @without_gc
    @consistent
    def snapshot(self, devs) -> dict:
        """Every qdisc, class and filter on ``devs`` (static parts only); None for a missing device.

        Filters are read from every classful qdisc (and both clsact hooks), not
        from classes.  Counters, timestamps, netem's random seed and the
        kernel-chosen index of each action are left out.
        """
        out: dict = dict.fromkeys(devs)  # None: the device is missing
        qdiscs = None
        for dev, index in self._present(devs):
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

    @consistent
    def queue_program(self, dev: str) -> int | None:
        """The id of ratelimit's queue program on ``dev``'s clsact egress hook, or None."""
        for data, off, end in list(self._filters(self._device(dev), TC_H_CLSACT_EGRESS)):
            amap = attr_map(data, off + 36, end)
            if cstr(data, amap.get(TCA_KIND)) == "bpf" and TCA_OPTIONS in amap:
                found = bpf.program(data, *amap[TCA_OPTIONS])
                if found is not None and found[0] == PROGRAM_NAME:
                    return found[1]
        return None

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
    def counters(self, table: FlowTable) -> dict:
        """Counters of each flow of ``table`` as columns (``counters.COLUMNS``): one class
        dump per HTB qdisc (shape mode), one filter dump per (device, parent) (police mode)."""
        self.links.forget()
        cols = table.empty()
        for dev, qdisc, want in table.classes:  # a dump per qdisc: see _classes
            index = self.links.index(dev)
            if index is not None:
                read_classes(self.chan.dump_chunks(dump_request(RTM_GETTCLASS, index, qdisc)), want, cols,
                             self._layouts[0])
        for dev, parent, want in table.filters:
            index = self.links.index(dev)
            if index is not None:
                read_filters(self._filter_chunks(index, parent), want, cols, self._layouts[1])
        table.fill_same(cols)
        return cols

    def stats(self, plan) -> list[dict]:
        """Counters of each of ``plan.flows``, one dict per flow (see ``counters``)."""
        cols = self.counters(FlowTable.of(plan))
        columns = [cols[name] for name in COLUMNS]
        return [{"direction": flow.direction, "host": flow.host, "port": flow.port, "dev": flow.dev,
                 **dict(zip(COLUMNS, values))} for flow, *values in zip(plan.flows, *columns)]


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
