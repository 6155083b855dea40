"""The executor: the only code that changes the kernel's traffic control.

It carries out plan operations in one network namespace (which must exist: we
never create one).  Each operation type has one small function in the dispatch
tables at the end; ``encode`` packs the messages, ``readback.Reader`` (which
the executor extends) reads state back, ``links`` handles devices through
pyroute2.

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

import dataclasses
import errno as errnos
import os
import time

from ..errors import ApplyError
from ..plan.filters import U32_ROOT_TABLE, DelFilter, U32Filter, U32Table
from ..plan.ops import AddIfb, Change, ClsactQdisc, DelClass, DelLink, DelQdisc, HtbQdisc, IngressQdisc, MqQdisc
from ..plan.queuepin import FILTER_HANDLE, FILTER_PRIO, KEY, PROGRAM_NAME, VALUE, QueueEntry, QueueMap, QueueProgram
from ..plan.shaping import AqmQdisc, FifoQdisc, HtbClass, NetemQdisc, TbfQdisc
from . import bpf, replay
from .encode import Encoder
from .nl import NLM_F_REQUEST, RTM_GETTFILTER, SEQ_OFFSET, TC_H_INGRESS, TC_H_ROOT, TCMSG
from .readback import Reader, without_gc
from .transport import KernelError, set_ack, strerror

BATCH_BYTES = 256 * 1024  # most bytes per send
BATCH_MSGS = 1024  # most messages per send (bounds the failure replies a batch can queue)
PROGRESS_EVERY_S = 0.2
TABLE_FREE_WAIT_S = 5.0  # longest wait for u32 to free a table's last link (``remove``)

_NOT_THERE = frozenset({errnos.ENOENT, errnos.EINVAL, errnos.ENODEV})
NOT_AS_IT_WAS = " does not read back as it was"  # how ``restore`` ends a device's problem of that kind


class StepFailed(ApplyError):
    """The kernel refused one operation of a plan."""

    def __init__(self, index: int, op, errno: int, kernel_message: str = "", total: int | None = None,
                 refused: tuple = ()):
        self.index, self.op, self.errno, self.kernel_message = index, op, errno, kernel_message
        self.total = total
        self.refused = refused or (index,)  # every operation of its batch the kernel refused (the rest went in)
        detail = f" ({kernel_message})" if kernel_message else ""
        of = f" of {total}" if total is not None else ""
        super().__init__(f"step {index + 1}{of} ({shorten(op_text(op))}) failed: {strerror(errno)}{detail}")


def op_text(op) -> str:
    return "; ".join(op.lines())


def shorten(text: str, width: int = 110) -> str:
    if len(text) <= width:
        return text
    keep = width - 5
    return text[:keep * 2 // 3] + " ... " + text[-(keep - keep * 2 // 3):]


class _NoDevice(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class Executor(Reader):
    """Carries out plan operations and reads traffic-control state in one namespace."""

    def __init__(self, netns: str | None = None):
        super().__init__(netns)
        self._maps: dict[str, int] = {}  # device -> the file descriptor of its queue map
        self._fresh()

    def close(self) -> None:
        for fd in self._maps.values():
            os.close(fd)
        self._maps.clear()
        super().close()

    def queue_map(self, dev: str) -> int:
        """The file descriptor of ``dev``'s queue map: the one this executor made, else the
        map of the program on the device's clsact egress hook."""
        fd = self._maps.get(dev)
        if fd is None:
            found = self.queue_program(dev)
            if found is None:
                raise KernelError(errnos.ENOENT, f"no queue program on {dev}")
            fd = self._maps[dev] = bpf.map_of_program(found)
        return fd

    def _fresh(self) -> None:
        """Forget device indexes and everything packed with them (links may have changed)."""
        self.links.forget()
        self.encoder = Encoder(self._ifindex, self.clock)

    def _ifindex(self, name: str) -> int:
        index = self.links.index(name)
        if index is None:
            raise _NoDevice(name)
        return index

    @without_gc
    def apply(self, ops, *, progress=None, echo=None) -> None:
        """Carry out ``ops`` in order; raise StepFailed on the first one the kernel refuses."""
        ops = tuple(ops)
        total = len(ops)
        self._fresh()
        enc, chan = self.encoder, self.chan
        batch = bytearray()
        where: list[int] = []  # op index of each message in the batch
        starts: list[int] = []  # where each message starts in the batch
        report = _Progress(progress, total)

        def flush():
            nonlocal batch, where, starts
            if not where:
                return
            set_ack(batch, starts[-1])
            first = chan.next_seq(len(where))
            for k, at in enumerate(starts):
                SEQ_OFFSET.pack_into(batch, at + 8, first + k)
            failures = chan.exchange(batch, first, first + len(where) - 1)
            if failures:
                seq, err, msg = min(failures)
                i = where[seq - first]
                raise StepFailed(i, ops[i], err, msg, total, tuple(sorted(where[f[0] - first] for f in failures)))
            batch, where, starts = bytearray(), [], []

        entries: list[int] = []  # a run of map entries, added in one call

        def add_entries():
            if not entries:
                return
            try:
                _queue_entries(self, [ops[i] for i in entries])
            except bpf.BpfError as e:
                at = entries[min(e.done, len(entries) - 1)]
                raise StepFailed(at, ops[at], e.errno, "", total) from None
            entries.clear()

        for i, op in enumerate(ops):
            if echo is not None:
                for line in op.lines():
                    echo(line)
            if type(op) is QueueEntry:
                flush()
                if entries and (ops[entries[0]].dev != op.dev or len(entries) >= BATCH_MSGS * 16):
                    add_entries()
                    report(i)
                entries.append(i)
                continue
            add_entries()
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
            except KernelError as e:
                raise StepFailed(i, op, e.errno, e.message, total) from None
            except bpf.BpfError as e:
                raise StepFailed(i, op, e.errno, e.log.strip()[-300:], total) from None
            except _NoDevice as e:
                raise StepFailed(i, op, errnos.ENODEV, f"no device {e.name}", total) from None
            report(i + 1)
        flush()
        add_entries()
        report(total, final=True)

    def remove(self, ops) -> None:
        """Carry out removals (DelQdisc, DelLink, DelClass, DelFilter, and the changes
        between them) one at a time, in order, each acknowledged, ignoring what is
        already gone."""
        ops = tuple(ops)
        self._fresh()
        for i, op in enumerate(ops):
            if type(op) not in _REMOVALS:
                raise TypeError(f"not a teardown operation: {op!r}")
            waited = 0.0
            while True:
                try:
                    _ALONE[type(op)](self, op)
                except KernelError as e:
                    if e.errno == errnos.EBUSY and type(op) is DelFilter and waited < TABLE_FREE_WAIT_S:
                        # u32 lets go of a table's links to it only after an RCU grace period
                        # once the filters that linked to it are gone
                        time.sleep(0.005 + waited)
                        waited += 0.005 + waited
                        continue
                    if e.errno not in _NOT_THERE:
                        raise StepFailed(i, op, e.errno, e.message, len(ops)) from None
                except _NoDevice:
                    pass
                break


    def restore(self, captured: dict) -> list[str]:
        """Send back what ``Reader.capture`` read (after the caller removed it): re-make a
        missing IFB device, re-create each captured message in order (see ``replay``),
        then compare a new capture with the old.  Returns what is not as it was (empty: the
        devices hold exactly what was captured), one phrase each."""
        problems: list[str] = []
        for dev, entry in captured.items():
            if not entry.get("exists"):
                continue
            link = entry.get("link")
            if link is not None and self.links.index(dev) is None:
                if link["kind"] != "ifb":
                    problems.append(f"device {dev} ({link['kind'] or 'plain'}) cannot be made again by ratelimit")
                    continue
                try:
                    self.links.add_ifb(dev)
                except KernelError as e:
                    problems.append(f"device {dev} could not be made again ({strerror(e.errno)})")
                    continue
                self._fresh()
            index = self.links.index(dev)
            if index is None:
                problems.append(f"device {dev} is gone")
                continue
            for m in replay.ordered(entry["messages"]):
                try:
                    self.chan.request(replay.request(m, index))
                except KernelError as e:
                    if e.errno != errnos.EEXIST:
                        detail = f": {e.message}" if e.message else ""
                        problems.append(f"{dev}: the kernel refused {replay.what(m)} ({strerror(e.errno)}{detail})")
        self._fresh()
        after = self.capture({dev: entry["parts"] for dev, entry in captured.items() if entry.get("exists")})
        for dev, entry in captured.items():
            if entry.get("exists") and after[dev].get("items") != entry["items"] and not any(
                    p.startswith((f"{dev}:", f"device {dev}")) for p in problems):
                problems.append(f"{dev}{NOT_AS_IT_WAS}")
        return problems


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
    ex.links.add_ifb(op.name, op.queues)
    ex._fresh()


def _queue_map(ex: Executor, op: QueueMap) -> None:
    """A new map for ``op.dev``'s program (a map made before by this executor is let go: the
    program loaded with it, if any, keeps it while it is attached)."""
    ex._ifindex(op.dev)
    fd = bpf.map_create(KEY.size, VALUE.size, op.entries, "ratelimit_q")
    old = ex._maps.pop(op.dev, None)
    if old is not None:
        os.close(old)
    ex._maps[op.dev] = fd


def _queue_entries(ex: Executor, ops: list) -> None:
    """Entries of one device's map, in one call."""
    bpf.map_update_batch(ex.queue_map(ops[0].dev), b"".join(op.key() for op in ops),
                         b"".join(op.value() for op in ops), len(ops))


def _queue_program(ex: Executor, op: QueueProgram) -> None:
    """Load the program with the device's map, and attach it to the clsact egress hook."""
    code = op.program().encode({"queues": ex.queue_map(op.dev)})
    fd = bpf.prog_load(code, PROGRAM_NAME)
    try:
        ex.chan.request(ex.encoder.bpf_filter(op.dev, FILTER_PRIO, FILTER_HANDLE, fd, PROGRAM_NAME, 0, NLM_F_REQUEST))
    finally:
        os.close(fd)


def _del_link(ex: Executor, op: DelLink) -> None:
    try:
        ex.links.delete(op.name)
    finally:
        ex._fresh()


def _alone(pack):
    """A dispatch entry that sends one packed message and waits for its acknowledgement."""
    def send(ex: Executor, op) -> None:
        ex.chan.request(pack(ex.encoder, op, 0, NLM_F_REQUEST))
    return send


def _del_filter(ex: Executor, op: DelFilter) -> None:
    """Remove a u32 node, table or list.  A node of the list's own root table is named by
    ``U32_ROOT_TABLE``: the kernel numbers that table itself, so it is asked for its
    number first (a GET of the root table answers with it)."""
    if op.in_root_table:
        answer = ex.chan.query(ex.encoder.del_filter(dataclasses.replace(op, handle=U32_ROOT_TABLE << 20), 0,
                                                     NLM_F_REQUEST, RTM_GETTFILTER))
        if answer is None:
            raise KernelError(errnos.ENOENT, "no root table")
        data, off, _ = answer
        root = TCMSG.unpack_from(data, off + 16)[2]
        op = dataclasses.replace(op, handle=(root & 0xFFF00000) | (op.handle & 0xFFFFF))
    ex.chan.request(ex.encoder.del_filter(op, 0, NLM_F_REQUEST))


# Operations sent on their own, each acknowledged before the next is sent.
_ALONE = {
    AddIfb: _add_ifb,
    DelLink: _del_link,
    HtbQdisc: _alone(Encoder.htb_qdisc),
    IngressQdisc: _alone(Encoder.ingress_qdisc),
    ClsactQdisc: _alone(Encoder.clsact_qdisc),
    MqQdisc: _alone(Encoder.mq_qdisc),
    QueueMap: _queue_map,
    QueueProgram: _queue_program,
    DelQdisc: _alone(Encoder.del_qdisc),
    DelClass: _alone(Encoder.del_class),
    DelFilter: _del_filter,
    Change: _alone(Encoder.change),
    NetemQdisc: _alone(Encoder.netem_qdisc),  # only when it is a root or ingress qdisc
}

_REMOVALS = (DelQdisc, DelLink, DelClass, DelFilter, Change)

# Operations packed into batches: (encoder, op, seq, flags) -> message bytes.
_BATCHED = {
    HtbClass: Encoder.htb_class,
    NetemQdisc: Encoder.netem_qdisc,
    FifoQdisc: Encoder.fifo_qdisc,
    AqmQdisc: Encoder.aqm_qdisc,
    TbfQdisc: Encoder.tbf_qdisc,
    U32Table: Encoder.u32_table,
    U32Filter: Encoder.u32_filter,
    Change: Encoder.change,
}

__all__ = ["Executor", "StepFailed"]
