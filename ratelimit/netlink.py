"""The executor: the only module that talks to the kernel.

It carries out plan operations over one rtnetlink socket, opened inside the
requested network namespace (which must exist: we never create one).  Each
operation type has one small function in the dispatch tables at the end;
``netlink_encode`` packs the messages and ``netlink_dump`` reads the dumps.

Speed comes from batching: the messages of consecutive classes, netem leaves,
u32 tables and filters go out many per ``send``; only the last of a batch asks
for an acknowledgement, and the kernel answers a failure whatever we ask, so
one round trip covers a batch.  The kernel carries on past a failure within a
batch, so root and ingress qdiscs and links are sent alone, each acknowledged
before anything under them goes out: a batch only holds classes, leaf qdiscs
and filters under qdiscs the plan made earlier.  If one of them fails, the
later ones of its batch that the kernel carried out go with those qdiscs when
the caller rolls back (the plan's teardown).
"""

import ctypes
import errno as errnos
import functools
import gc
import os
import socket
import struct
import time

from . import netlink_dump as dump
from .errors import ApplyError, NotFoundError, PermissionDenied
from .netlink_encode import (IFINFOMSG, IFLA_IFNAME, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_REQUEST, NLMSG_DONE,
                             NLMSG_ERROR, NLMSG_OVERRUN, NLMSGERR_ATTR_MSG, NLMSGHDR, RTM_GETQDISC,
                             RTM_GETTCLASS, RTM_GETTFILTER, RTM_NEWLINK, TCA_KIND, TC_H_CLSACT_EGRESS,
                             TC_H_CLSACT_INGRESS, TC_H_INGRESS, TC_H_ROOT, Encoder, clock, getlink_request)
from .plan import (INGRESS_HANDLE, AddIfb, DelLink, DelQdisc, HtbClass, HtbQdisc, IngressQdisc, NetemQdisc,
                   U32Filter, U32Table)

SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
CLONE_NEWNET = 0x40000000
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # not in Python's socket module
NETNS_DIRS = ("/run/netns", "/var/run/netns")

BATCH_BYTES = 256 * 1024  # most bytes per send
BATCH_MSGS = 1024  # most messages per send (bounds the failure replies a batch can queue)
SOCKET_BUFFER = 8 * 1024 * 1024
PROGRESS_EVERY_S = 0.2

_NOT_THERE = frozenset({errnos.ENOENT, errnos.EINVAL, errnos.ENODEV})
_ERR = struct.Struct("=i")
_SEQ = struct.Struct("=I")


class StepFailed(ApplyError):
    """The kernel refused one operation of a plan."""

    def __init__(self, index: int, op, errno: int, kernel_message: str = "", total: int | None = None):
        self.index, self.op, self.errno, self.kernel_message = index, op, errno, kernel_message
        self.total = total
        words = os.strerror(errno) if errno else "failed"
        detail = f" ({kernel_message})" if kernel_message else ""
        of = f" of {total}" if total is not None else ""
        super().__init__(f"step {index + 1}{of} ({shorten(op_text(op))}) failed: {words}{detail}")


def op_text(op) -> str:
    return op.tc() if hasattr(op, "tc") else "; ".join(op.shell())


def shorten(text: str, width: int = 110) -> str:
    if len(text) <= width:
        return text
    keep = width - 5
    return text[:keep * 2 // 3] + " ... " + text[-(keep - keep * 2 // 3):]


class _KernelError(Exception):
    def __init__(self, errno: int, message: str = ""):
        super().__init__(errno, message)
        self.errno, self.message = errno, message


class _NoDevice(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


# ------------------------------------------------------------------ the socket


def _netns_path(netns: str) -> str:
    missing = NotFoundError(f"--netns: '{netns}' does not exist (see: ip netns list)")
    if not netns or "/" in netns or netns in (".", ".."):
        raise missing
    for d in NETNS_DIRS:
        path = os.path.join(d, netns)
        if os.path.exists(path):
            return path
    raise missing


def _open_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    try:
        for opt in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
            try:
                sock.setsockopt(SOL_NETLINK, opt, 1)
            except OSError:
                pass  # old kernels: plain acknowledgements
        for force, plain in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)
        sock.bind((0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def _socket_in(netns: str | None) -> socket.socket:
    """A NETLINK_ROUTE socket in ``netns`` (entered by this thread only, and left at once)."""
    if netns is None:
        return _open_socket()
    path = _netns_path(netns)
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NotFoundError(f"--netns: '{netns}' does not exist (see: ip netns list)") from None
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                if err == errnos.EPERM:
                    raise PermissionDenied(f"--netns: entering '{netns}' needs root")
                raise NotFoundError(f"--netns: '{netns}' is not a network namespace ({os.strerror(err)})")
            try:
                return _open_socket()
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "cannot return to the original network namespace")
        finally:
            os.close(target)
    finally:
        os.close(own)


def _without_gc(method):
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


# ------------------------------------------------------------------ the executor


class Executor:
    """Carries out plan operations and reads traffic-control state in one namespace."""

    def __init__(self, netns: str | None = None):
        self.netns = netns
        try:
            self._sock = _socket_in(netns)
        except PermissionError:
            raise PermissionDenied("netlink needs root (run with sudo)") from None
        self._seq = 1
        self._dumping = False
        self._rbuf = bytearray(1 << 20)
        self._clock = clock()
        self._fresh()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fresh(self) -> None:
        """Forget device indexes and everything packed with them (links may have changed)."""
        self._index: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self.encoder = Encoder(self._ifindex, self._clock)

    def _ifindex(self, name: str) -> int:
        index = self._index.get(name)
        if index is None:
            index = self.link_index(name)
            if index is None:
                raise _NoDevice(name)
            self._index[name] = index
        return index

    def _next_seq(self, n: int = 1) -> int:
        """Reserve ``n`` consecutive sequence numbers (never wrapping inside a range)."""
        if self._seq + n >= 0x7FFFFFFF:
            self._seq = 1
        seq = self._seq
        self._seq += n
        return seq

    def _stamp(self, msg: bytes) -> tuple[bytearray, int]:
        msg = bytearray(msg)
        seq = self._next_seq()
        _SEQ.pack_into(msg, 8, seq)
        return msg, seq

    # -- transport

    def _recv(self) -> memoryview:
        try:
            n = self._sock.recv_into(self._rbuf)
        except OSError as e:
            if e.errno == errnos.ENOBUFS:
                raise ApplyError("netlink: replies were lost (receive buffer overflowed)") from None
            raise
        return memoryview(self._rbuf)[:n]

    def _send(self, data) -> None:
        if self._dumping:
            raise RuntimeError("netlink: a request was sent while a dump was being read")
        try:
            self._sock.send(data)
        except PermissionError:
            raise PermissionDenied("changing traffic control needs root (run with sudo)") from None

    def _exchange(self, data, first_seq: int, last_seq: int) -> list[tuple[int, int, str]]:
        """Send ``data`` (messages first_seq..last_seq, the last asking for an ack); return
        the failures as (seq, errno, kernel message), waiting for the last one's answer."""
        self._send(data)
        failures = []
        while True:
            buf = self._recv()
            off, n = 0, len(buf)
            while off + 16 <= n:
                length, kind, flags, seq, _ = NLMSGHDR.unpack_from(buf, off)
                if length < 16:
                    break
                if kind == NLMSG_ERROR and first_seq <= seq <= last_seq:
                    err = -_ERR.unpack_from(buf, off + 16)[0]
                    if err:
                        failures.append((seq, err, _extack(buf, off, length, flags)))
                    if seq == last_seq:
                        return failures
                off += (length + 3) & ~3

    def _request(self, msg: bytes) -> None:
        """One message, acknowledged; raises _KernelError when refused."""
        msg, seq = self._stamp(msg)
        _set_ack(msg, 0)
        failures = self._exchange(msg, seq, seq)
        if failures:
            raise _KernelError(failures[0][1], failures[0][2])

    def _dump(self, msg: bytes):
        """Yield (buffer, offset, end) of each message a dump request returns."""
        msg, seq = self._stamp(msg)
        self._send(msg)
        self._dumping = True
        try:
            yield from self._read_dump(seq)
        finally:
            self._dumping = False

    def _read_dump(self, seq: int):
        while True:
            buf = self._recv()
            data = bytes(buf)  # the caller may hold on to it while we read on
            off, n = 0, len(data)
            while off + 16 <= n:
                length, kind, _, mseq, _ = NLMSGHDR.unpack_from(data, off)
                if length < 16:
                    break
                if mseq == seq:
                    if kind == NLMSG_DONE:
                        return
                    if kind == NLMSG_ERROR:
                        err = -_ERR.unpack_from(data, off + 16)[0]
                        if err:
                            raise _KernelError(err, _extack(data, off, length, NLMSGHDR.unpack_from(data, off)[2]))
                        return
                    if kind != NLMSG_OVERRUN:
                        yield data, off, off + length
                off += (length + 3) & ~3

    # -- links

    def link_index(self, name: str) -> int | None:
        """The interface index of ``name`` in our namespace, or None."""
        if not name or len(name) > 15:
            return None
        for data, off, end in self._get_link(getlink_request(0, name=name)):
            return IFINFOMSG.unpack_from(data, off + 16)[2]
        return None

    def link_name(self, index: int) -> str | None:
        name = self._names.get(index)
        if name is None:
            for data, off, end in self._get_link(getlink_request(0, index=index)):
                for kind, s, e in dump.attrs(data, off + 16 + IFINFOMSG.size, end):
                    if kind == IFLA_IFNAME:
                        name = self._names[index] = dump.cstr(data, (s, e))
        return name

    def _get_link(self, msg: bytes):
        msg, seq = self._stamp(msg)
        self._send(msg)
        while True:
            buf = bytes(self._recv())
            off = 0
            while off + 16 <= len(buf):
                length, kind, _, mseq, _ = NLMSGHDR.unpack_from(buf, off)
                if length < 16:
                    break
                if mseq == seq:
                    if kind == RTM_NEWLINK:
                        yield buf, off, off + length
                        return
                    if kind == NLMSG_ERROR:
                        err = -_ERR.unpack_from(buf, off + 16)[0]
                        if err in (0, errnos.ENODEV, errnos.ENOENT, errnos.EINVAL):
                            return
                        raise _KernelError(err, "")
                off += (length + 3) & ~3

    # -- apply and remove

    @_without_gc
    def apply(self, ops, *, progress=None, echo=None) -> None:
        """Carry out ``ops`` in order; raise StepFailed on the first one the kernel refuses."""
        ops = tuple(ops)
        total = len(ops)
        self._fresh()
        enc = self.encoder
        batch = bytearray()
        where: list[int] = []  # op index of each message in the batch
        starts: list[int] = []  # where each message starts in the batch
        report = _Progress(progress, total)

        def flush():
            nonlocal batch, where, starts
            if not where:
                return
            _set_ack(batch, starts[-1])
            first = self._next_seq(len(where))
            for k, at in enumerate(starts):
                _SEQ.pack_into(batch, at + 8, first + k)
            failures = self._exchange(batch, first, first + len(where) - 1)
            if failures:
                seq, err, msg = min(failures)
                i = where[seq - first]
                raise StepFailed(i, ops[i], err, msg, total)
            batch, where, starts = bytearray(), [], []

        for i, op in enumerate(ops):
            if echo is not None:
                for line in _lines(op):
                    echo(line)
            packer = _BATCHED.get(type(op))
            if packer is not None and not (type(op) is NetemQdisc and op.parent in (TC_H_ROOT, TC_H_INGRESS)):
                try:
                    msg = packer(enc, op, 0, NLM_F_REQUEST)
                except _NoDevice as e:
                    flush()
                    raise StepFailed(i, op, errnos.ENODEV, f"no device {e.name}", total) from None
                except ValueError as e:
                    flush()
                    raise StepFailed(i, op, errnos.EINVAL, str(e), total) from None
                starts.append(len(batch))
                batch += msg
                where.append(i)
                if len(where) >= BATCH_MSGS or len(batch) >= BATCH_BYTES:
                    flush()
                    report(i + 1)
                continue
            flush()
            alone = _ALONE.get(type(op))
            if alone is None:
                raise TypeError(f"not a plan operation: {op!r}")
            try:
                alone(self, op)
            except _KernelError as e:
                raise StepFailed(i, op, e.errno, e.message, total) from None
            except _NoDevice as e:
                raise StepFailed(i, op, errnos.ENODEV, f"no device {e.name}", total) from None
            report(i + 1)
        flush()
        report(total, final=True)

    def remove(self, ops) -> None:
        """Carry out teardown operations (DelQdisc, DelLink), ignoring what is already gone."""
        ops = tuple(ops)
        self._fresh()
        for i, op in enumerate(ops):
            if not isinstance(op, (DelQdisc, DelLink)):
                raise TypeError(f"not a teardown operation: {op!r}")
            try:
                _ALONE[type(op)](self, op)
            except _KernelError as e:
                if e.errno not in _NOT_THERE:
                    raise StepFailed(i, op, e.errno, e.message, len(ops)) from None
            except _NoDevice:
                pass

    # -- reading state

    def _qdiscs(self) -> list[tuple[int, tuple]]:
        enc = self.encoder
        return [dump.qdisc_item(d, o, e) for d, o, e in self._dump(enc.dump_request(RTM_GETQDISC, 0))]

    def _device(self, dev: str) -> int:
        index = self.link_index(dev)
        if index is None:
            where = f" in namespace '{self.netns}'" if self.netns else ""
            raise NotFoundError(f"--interface: '{dev}' does not exist{where} (see: ip link)")
        return index

    def _qdisc_heads(self, index: int, parents=(TC_H_ROOT, TC_H_INGRESS)) -> list[tuple[int, int, str]]:
        """(parent, handle, kind) of the qdiscs on one device attached at ``parents``."""
        out = []
        for data, off, end in self._dump(self.encoder.dump_request(RTM_GETQDISC, 0, index)):
            ifindex, handle, parent, _ = dump.header(data, off)
            if ifindex == index and parent in parents:
                out.append((parent, handle, dump.cstr(data, dump.attr_map(data, off + 36, end).get(TCA_KIND))))
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

    def _filter_parents(self, qdiscs) -> list[int]:
        parents = []
        for parent, handle, kind in qdiscs:
            if kind == "clsact":
                parents += [TC_H_CLSACT_INGRESS, TC_H_CLSACT_EGRESS]
            elif handle and kind not in dump.CLASSLESS:
                parents.append(handle)
        return parents

    def _filters(self, index: int, parent: int):
        try:
            yield from self._dump(self.encoder.dump_request(RTM_GETTFILTER, 0, index, parent))
        except _KernelError as e:
            if e.errno not in (errnos.EINVAL, errnos.ENOENT, errnos.EOPNOTSUPP):
                raise

    @_without_gc
    def snapshot(self, devs) -> dict:
        """Every qdisc, class and filter on ``devs`` (static parts only); None for a missing device.

        Filters are read from every classful qdisc (and both clsact hooks), not
        from classes.  Counters, timestamps, netem's random seed and the
        kernel-chosen index of each action are left out.
        """
        self._fresh()
        out: dict = {}
        qdiscs = None
        for dev in devs:
            index = self.link_index(dev)
            if index is None:
                out[dev] = None
                continue
            if qdiscs is None:
                qdiscs = self._qdiscs()
            mine = sorted((item for i, item in qdiscs if i == index), key=_order)
            classes = sorted((dump.class_item(d, o, e)[1]
                              for d, o, e in self._dump(self.encoder.dump_request(RTM_GETTCLASS, 0, index))),
                             key=_order)
            filters = []
            for parent in self._filter_parents([(q[1], q[2], q[3]) for q in mine]):
                msgs = list(self._filters(index, parent))  # link_name asks the kernel too
                filters += [dump.filter_item(d, o, e, parent, self.link_name) for d, o, e in msgs]
            out[dev] = {"qdiscs": tuple(mine), "classes": tuple(classes), "filters": tuple(sorted(filters, key=_order))}
        return out

    @_without_gc
    def read_back(self, dev: str) -> list:
        """The u32 tables and filters on ``dev`` (root and ingress) as plan operations."""
        self._fresh()
        index = self._device(dev)
        parents = []
        for parent, handle, kind in self._qdisc_heads(index):
            if parent == TC_H_ROOT and handle and kind not in dump.CLASSLESS:
                parents.append(handle)
            elif parent == TC_H_INGRESS and kind == "ingress":
                parents.append(INGRESS_HANDLE)
        out = []
        for parent in parents:
            for data, off, end in list(self._filters(index, parent)):  # link_name asks the kernel too
                op = dump.u32_op(data, off, end, dev, parent, self._clock, self.link_name)
                if op is not None:
                    out.append(op)
        return out

    @_without_gc
    def stats(self, plan) -> list[dict]:
        """Counters of each of ``plan.flows``: one dump per (device, parent) in police mode,
        one class dump per device in shape mode."""
        self._fresh()
        rows, by_filter, by_class = [], {}, {}
        where = None
        for flow in plan.flows:
            row = {"direction": flow.direction, "host": flow.host, "port": flow.port, "dev": flow.dev,
                   "bytes": 0, "packets": 0, "drops": 0, "overlimits": 0, "backlog_bytes": 0, "backlog_pkts": 0}
            rows.append(row)
            if flow.classid is not None:
                by_class.setdefault(flow.dev, {}).setdefault(flow.classid, []).append(row)
                continue
            parent = getattr(flow, "parent", None)
            if parent is None:
                if where is None:
                    where = _leaf_parents(plan.ops)
                root, ingress = where.get((flow.dev, flow.prio, flow.handle), (None, False))
                # the same u32 handle can exist under both the root and the ingress qdisc of a device
                parent = INGRESS_HANDLE if root is None or (ingress and flow.direction == "source") else root
            by_filter.setdefault((flow.dev, parent), {}).setdefault((flow.prio, flow.handle), []).append(row)
        read = dump.action_counters()
        for (dev, parent), want in by_filter.items():
            index = self.link_index(dev)
            if index is None:
                continue
            for data, off, end in self._filters(index, parent):
                _, handle, _, info = dump.header(data, off)
                hit = want.get((info >> 16, handle))
                if hit:
                    _fill(hit, read(data, off, end))
        read = dump.class_counters()
        for dev, want in by_class.items():
            index = self.link_index(dev)
            if index is None:
                continue
            for data, off, end in self._dump(self.encoder.dump_request(RTM_GETTCLASS, 0, index)):
                hit = want.get(dump.header(data, off)[1])
                if hit:
                    _fill(hit, read(data, off, end))
        return rows


# ------------------------------------------------------------------ helpers


def _set_ack(buf: bytearray, at: int) -> None:
    flags = struct.unpack_from("=H", buf, at + 6)[0]
    struct.pack_into("=H", buf, at + 6, flags | NLM_F_ACK)


def _extack(buf, off: int, length: int, flags: int) -> str:
    """The kernel's extended-ack message in an NLMSG_ERROR, if any."""
    if not flags & NLM_F_ACK_TLVS:
        return ""
    inner_len = NLMSGHDR.unpack_from(buf, off + 20)[0]
    start = off + 20 + (16 if flags & 0x100 else inner_len)  # NLM_F_CAPPED: the request is not echoed
    for kind, s, e in dump.attrs(buf, start, off + length):
        if kind == NLMSGERR_ATTR_MSG:
            return dump.cstr(buf, (s, e)).strip()
    return ""


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


def _lines(op) -> list[str]:
    return op.shell() if hasattr(op, "shell") else [op.tc()]


class _Progress:
    """Calls progress(done, total) about every 1% or 0.2 s, and once at the end."""

    def __init__(self, fn, total: int):
        self.fn, self.total = fn, total
        self.step = max(1, total // 100)
        self.next = self.step
        self.last = time.monotonic()

    def __call__(self, done: int, final: bool = False) -> None:
        if self.fn is None:
            return
        now = time.monotonic()
        if final or done >= self.next or now - self.last >= PROGRESS_EVERY_S:
            self.fn(done, self.total)
            self.next = done + self.step
            self.last = now


# ------------------------------------------------------------------ one function per operation type


def _add_ifb(ex: Executor, op: AddIfb) -> None:
    ex._request(ex.encoder.add_ifb(op.name, 0, NLM_F_REQUEST))
    ex._fresh()
    ex._request(ex.encoder.link_up(ex._ifindex(op.name), 0, NLM_F_REQUEST))


def _del_link(ex: Executor, op: DelLink) -> None:
    try:
        ex._request(ex.encoder.del_link(op.name, 0, NLM_F_REQUEST))
    finally:
        ex._fresh()


def _htb_qdisc(ex: Executor, op: HtbQdisc) -> None:
    ex._request(ex.encoder.htb_qdisc(op, 0, NLM_F_REQUEST))


def _ingress_qdisc(ex: Executor, op: IngressQdisc) -> None:
    ex._request(ex.encoder.ingress_qdisc(op, 0, NLM_F_REQUEST))


def _del_qdisc(ex: Executor, op: DelQdisc) -> None:
    ex._request(ex.encoder.del_qdisc(op, 0, NLM_F_REQUEST))


def _netem_alone(ex: Executor, op: NetemQdisc) -> None:
    ex._request(ex.encoder.netem_qdisc(op, 0, NLM_F_REQUEST))


# Operations sent on their own, each acknowledged before the next is sent.
_ALONE = {
    AddIfb: _add_ifb,
    DelLink: _del_link,
    HtbQdisc: _htb_qdisc,
    IngressQdisc: _ingress_qdisc,
    DelQdisc: _del_qdisc,
    NetemQdisc: _netem_alone,  # only when it is a root or ingress qdisc
}

# Operations packed into batches: (encoder, op, seq, flags) -> message bytes.
_BATCHED = {
    HtbClass: Encoder.htb_class,
    NetemQdisc: Encoder.netem_qdisc,
    U32Table: Encoder.u32_table,
    U32Filter: Encoder.u32_filter,
}

__all__ = ["Executor", "StepFailed"]
