"""A trace driver's rounds as netlink messages: each traced link's class and gate packed
once, the rates patched in for each round, all in array operations (numpy).

``Templates(classes, gates)`` packs every link's class change and gate change
(what ``Encoder.change`` sends) at placeholder rates, one row of ``ROW`` bytes each.  A
round names rows and their new rates (``driver.vector.Round.parts``); ``messages`` copies
those rows and writes the rate fields in place, as ``kinds.htb.class_packer`` and
``kinds.tbf.options`` compute them; ``apply_round`` sends them.  tests/test_vector.py
checks the bytes against the encoder's, rate for rate.  A rate too large for a 32-bit rate spec (34 Gbit/s) needs a
64-bit attribute, a longer message: ``messages`` then gives None and the round goes out
op by op.  Why: docs/design.md, "Steps in arrays".

For example, once ``t = Templates([klass], [gate])`` is ``t.ready(ex.encoder)``,
``t.messages([("gate", np.array([0]), (np.array([bps]),))])`` is one 96-byte message that
sets link 0's gate to ``bps``.
"""

import dataclasses

import numpy as np

from ..plan.ops import Change
from .executor import BATCH_MSGS, StepFailed, _NoDevice
from .readback import without_gc
from .kinds import htb, tbf
from .nl import NLM_F_ACK, NLM_F_REQUEST, TCMSG, U32_MAX
from .rates import TIME_UNITS_PER_SEC

ROW = 96  # the bytes of a class change and of a gate change, with 32-bit rates and no rate tables
_HEAD = 16 + TCMSG.size  # nlmsghdr and tcmsg: where TCA_KIND starts
_FLAGS, _SEQ, _IFINDEX = 6 // 2, 8 // 4, 20 // 4  # nlmsghdr's flags (u16), seq (u32); tcmsg's ifindex (i32)
_CLASS = {name: (_HEAD + at) // 4 for name, at in
          (("rate", htb.RATE_AT), ("ceil", htb.CEIL_AT), ("buffer", htb.BUFFER_AT), ("cbuffer", htb.CBUFFER_AT))}
_GATE = {"rate": (_HEAD + tbf.RATE_AT) // 4, "buffer": (_HEAD + tbf.BUFFER_AT) // 4}


class Templates:
    """One class message and one gate message a link, for the links of one plan (``classes``,
    ``gates``: the plan's operations), packed by ``ready``."""

    def __init__(self, classes, gates):
        self.ops = (classes, gates)
        self.classes = self.gates = None
        self.devices = [op.dev for op in classes]
        self.gate_burst = np.array([gate.burst_bytes for gate in gates], dtype=np.int64)

    def ready(self, encoder) -> None:
        """Pack every link's messages with ``encoder`` (its devices' indexes, its clock), once."""
        if self.classes is not None:
            return
        classes, gates = self.ops
        self.clock = encoder.clock
        self.ifindex = {dev: encoder.ifindex(dev) for dev in set(self.devices)}
        self.gates = self._pack(encoder, [dataclasses.replace(gate, rate_bps=64) for gate in gates])
        self.classes = self._pack(encoder, [op.with_rates(8, 8, 1) for op in classes])

    @staticmethod
    def _pack(encoder, ops):
        rows = np.zeros((len(ops), ROW), dtype=np.uint8)
        for i, op in enumerate(ops):
            msg = encoder.change(Change.of(op), 0, NLM_F_REQUEST)
            if len(msg) != ROW:
                raise ValueError(f"a {type(op).__name__}'s change is {len(msg)} bytes, not {ROW}")
            rows[i] = np.frombuffer(msg, dtype=np.uint8)
        return rows

    def follow(self, ifindex) -> None:
        """Put each device's index (``ifindex(name)``) in its rows, where it changed."""
        for dev, old in list(self.ifindex.items()):
            new = ifindex(dev)
            if new != old:
                rows = np.flatnonzero(np.array(self.devices) == dev)
                for table in (self.classes, self.gates):
                    table.view(np.int32)[rows, _IFINDEX] = new
                self.ifindex[dev] = new

    def messages(self, parts):
        """The messages of ``parts`` in order, one row each (None: a rate needs 64 bits)."""
        out = []
        for kind, rows, fields in parts:
            if not len(rows):
                continue
            msgs = (self._gates if kind == "gate" else self._classes)(rows, *fields)
            if msgs is None:
                return None
            out.append(msgs)
        return np.concatenate(out) if out else np.zeros((0, ROW), dtype=np.uint8)

    def _classes(self, rows, rate_bps, ceil_bps, burst_bytes):
        rate, ceil = _rate_bytes(rate_bps), _rate_bytes(ceil_bps)
        if rate.max() > U32_MAX or ceil.max() > U32_MAX:
            return None
        msgs = self.classes[rows]
        words = msgs.view(np.uint32)
        buffer = _xmittime(self.clock, rate, burst_bytes)
        words[:, _CLASS["rate"]], words[:, _CLASS["ceil"]], words[:, _CLASS["buffer"]] = rate, ceil, buffer
        words[:, _CLASS["cbuffer"]] = np.where(ceil == rate, buffer, _xmittime(self.clock, ceil, burst_bytes))
        return msgs

    def _gates(self, rows, rate_bps):
        rate = _rate_bytes(rate_bps)
        if rate.max() > U32_MAX:
            return None
        msgs = self.gates[rows]
        words = msgs.view(np.uint32)
        words[:, _GATE["rate"]], words[:, _GATE["buffer"]] = rate, _xmittime(self.clock, rate, self.gate_burst[rows])
        return msgs


@without_gc
def apply_round(ex, round_, templates) -> None:
    """Carry out a trace driver's round (``driver.vector.Round``) with the executor ``ex``:
    its delay stages as ``ex.apply`` does, then its rates in the messages of ``templates``,
    batched as ``apply`` batches; raise StepFailed on the first one the kernel refuses."""
    ex._fresh()
    try:
        templates.ready(ex.encoder)
        templates.follow(ex._ifindex)
    except _NoDevice:
        return ex.apply(round_.ops())  # it names the device and the op
    msgs = templates.messages(round_.parts)
    if msgs is None:  # a rate needs 64 bits
        return ex.apply(round_.ops())
    base, total = len(round_.stages), len(round_)
    if base:
        ex.apply(round_.stages)
    first = ex.chan.next_seq(len(msgs))
    stamp(msgs, first, BATCH_MSGS)
    for at in range(0, len(msgs), BATCH_MSGS):
        end = min(at + BATCH_MSGS, len(msgs))
        failures = ex.chan.exchange(msgs[at:end], first + at, first + end - 1)
        if failures:
            seq, err, msg = min(failures)
            i = base + seq - first
            raise StepFailed(i, round_.op(i), err, msg, total)


def stamp(msgs, first_seq: int, batch: int) -> None:
    """Number ``msgs`` from ``first_seq`` on and ask for an acknowledgement of the last of
    every ``batch`` (``executor.apply``'s rule: one round trip a batch)."""
    msgs.view(np.uint32)[:, _SEQ] = np.arange(first_seq, first_seq + len(msgs), dtype=np.uint32)
    flags = msgs.view(np.uint16)[:, _FLAGS]
    flags[batch - 1::batch] |= NLM_F_ACK
    flags[-1] |= NLM_F_ACK


def _rate_bytes(rate_bps):
    """``rates.rate_bytes`` of every rate (all below 2**53)."""
    return np.trunc(np.asarray(rate_bps, dtype=np.int64) / 8).astype(np.int64)


def _xmittime(clock, rate_bytes, size):
    """``rates.Clock.xmittime`` of every (rate, size), the same operations in the same order."""
    time_us = np.minimum(np.trunc(TIME_UNITS_PER_SEC * (np.asarray(size, dtype=np.int64) / rate_bytes)), U32_MAX)
    return np.minimum(np.trunc(time_us * clock.tick_in_usec), U32_MAX).astype(np.uint32)
