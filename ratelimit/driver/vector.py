"""The driver's steps as array operations: ``steps.Stepper``'s rules for every link at once.

``VectorStepper`` takes the links ``steps.traced_links`` gives and answers as
``steps.Stepper`` does (``changes``, ``landed``, ``learn``, ``forget``, the counts), change
for change: the same links, rates and order, from the same floating-point operations in
the same order (tests/test_vector.py holds ``Stepper`` as the reference).  Its state is
columns, one entry a link: what the kernel was last told, what each link owes, its
packets.  A step is a few dozen numpy operations over them, and each window's rates are
worked out once (``traces.windows.Ring``).  Its ``changes`` give a ``Round``: rows and
their rates, which ``kernel.rounds`` packs from templates.  Why: docs/design.md, "Steps in
arrays".

For example, ``VectorStepper(links, 100).changes(0, resend=True)`` is a round that sets
every link's class and gate to window 0's.
"""

import numpy as np

from ..plan import gate
from ..plan.ops import Change
from ..traces.windows import Ring
from .steps import CHANGE_GAIN, LEARN_PACKETS, PAY_LEAST, PAYBACK, RISE, SHUT_GAIN, SPAN_WINDOWS, stage_changes

UNKNOWN = -1  # a rate or gate not known (``Traced.rate_bps`` None)
OPEN, SHUT = gate.OPEN_BPS, gate.SHUT_BPS


class Round:
    """One step's changes: the delay stages (operations), then the gates that shut or
    hold, the classes' new rates, the gates that open, as rows of ``links`` (``parts``)."""

    def __init__(self, links, stages, parts):
        self.links, self.stages, self.parts = links, stages, parts

    def __len__(self) -> int:
        return len(self.stages) + sum(len(rows) for _, rows, _ in self.parts)

    def op(self, i: int):
        """The ``i``-th operation, as ``Stepper.changes`` gives it."""
        if i < len(self.stages):
            return self.stages[i]
        i -= len(self.stages)
        for kind, rows, fields in self.parts:
            if i < len(rows):
                link = self.links[int(rows[i])]
                if kind == "gate":
                    return Change.of(link.gate_at(int(fields[0][i])))
                return Change.of(link.klass.with_rates(*(int(f[i]) for f in fields)))
            i -= len(rows)
        raise IndexError(i)

    def ops(self) -> tuple:
        return tuple(self.op(i) for i in range(len(self)))


class VectorStepper:
    """``steps.Stepper`` over columns (see the module docstring)."""

    def __init__(self, links: list, step_ms: int):
        if step_ms <= 0:
            raise ValueError(f"step {step_ms!r} ms is not positive")
        self.links, self.step_ms = links, step_ms
        self._staged = [link for link in links if link.staged]  # a schedule's delay stages: few, kept per link
        n = len(links)
        self.ring = Ring(links, step_ms, SPAN_WINDOWS)
        self.frame = np.array([link.gate.burst_bytes for link in links], dtype=np.float64)
        self.devices = np.array([link.gate.dev for link in links], dtype=object)
        rates = [link.rates for link in links]
        self.share = np.array([r.share_bps for r in rates], dtype=np.int64)
        self.over = np.array([r.over_bps for r in rates], dtype=np.int64)
        self._bursts = _Bursts(rates)
        self.rate = np.full(n, UNKNOWN, dtype=np.int64)
        self.gate = np.full(n, UNKNOWN, dtype=np.int64)
        self.ahead = np.zeros(n)
        self.counted = np.full(n, UNKNOWN, dtype=np.int64)
        self.packet = np.full(n, np.nan)  # learnt (``learn``); nan: full frames
        self.seen = np.full((2, n), UNKNOWN, dtype=np.int64)  # bytes, packets at the last reading
        self.learnt = 0
        self.reopened: frozenset[str] = frozenset()
        self._sent = None

    def _gain(self, rows, ahead_bytes) -> None:
        """``Traced.gain`` for ``rows``: at most two frames either way."""
        most = 2 * self.frame[rows]
        self.ahead[rows] = np.clip(self.ahead[rows] + ahead_bytes, -most, most)

    def changes(self, k: int, resend: bool = False) -> Round:
        """``Stepper.changes``, as a ``Round``."""
        step_ms, step_s = self.step_ms, self.step_ms / 1000
        self.ring.at(k)
        rate, nxt = self.ring.column(k), self.ring.column(k + 1)
        was_rate, was_gate = self.rate.copy(), self.gate.copy()
        klass = np.full(len(self.links), UNKNOWN, dtype=np.int64)
        new_gate = np.full(len(self.links), OPEN, dtype=np.int64)
        packet = np.where(np.isnan(self.packet), self.frame, self.packet)
        zero = rate == 0
        new_gate[zero] = SHUT
        self.ahead[zero] = 0.0
        span = ~zero & (packet * 8000 > rate * step_ms)
        if span.any():
            rows = np.flatnonzero(span)
            klass[rows] = _span_bps(self.ring, k, rows, packet[rows], step_ms)
        rest = np.flatnonzero(~zero & ~span)
        r, n, p, f, wg = rate[rest], nxt[rest], packet[rest], self.frame[rest], was_gate[rest]
        rise = (n >= RISE * r) & (CHANGE_GAIN * p * (n / r - 1) > f - p)
        held = (wg != UNKNOWN) & (wg != OPEN) & (wg != SHUT)
        # a rise the gate holds
        rows, r1, w1 = rest[rise], r[rise], wg[rise]
        klass[rows], new_gate[rows] = n[rise], r1
        keep = held[rise] & (r1 / RISE <= w1) & (w1 <= r1 * RISE) & (not resend)
        new_gate[rows[keep]] = w1[keep]
        self._gain(rows[keep], (w1[keep] - r1[keep]) * step_s / 8)
        self._gain(rows[~keep], f[rise][~keep] - p[rise][~keep])
        # a flat or falling window, paid for
        flat = ~rise
        rows, r2, n2, p2, w2 = rest[flat], r[flat], n[flat], p[flat], wg[flat]
        h = held[flat]
        self._gain(rows[h], CHANGE_GAIN * p2[h] * (1 - w2[h] / r2[h]))
        c = (n2 != r2) & (self.counted[rows] != k)
        self._gain(rows[c], np.where(n2[c] == 0, SHUT_GAIN * self.frame[rows[c]],
                                     CHANGE_GAIN * p2[c] * (1 - n2[c] / r2[c])))
        self.counted[rows[c]] = k
        most = PAYBACK * r2
        ahead = self.ahead[rows]
        pay = np.where(np.abs(ahead) >= PAY_LEAST * p2, ahead * 8 / step_s, 0.0)
        pay = np.clip(pay, -most, most)
        klass[rows] = np.rint(r2 - pay)
        self.ahead[rows] = ahead - pay * step_s / 8
        return self._round(k, resend, klass, new_gate, was_rate, was_gate)

    def _round(self, k, resend, klass, new_gate, was_rate, was_gate) -> Round:
        """The changes that take the kernel from (was_rate, was_gate) to (klass, new_gate)."""
        classes = (klass != UNKNOWN) & (resend | (klass != was_rate))
        gates = resend | (new_gate != was_gate)
        self.rate[classes] = klass[classes]
        self.gate[gates] = new_gate[gates]
        self.reopened = frozenset(self.devices[gates & (was_gate == SHUT)].tolist())
        closing, opening = gates & (new_gate != OPEN), gates & (new_gate == OPEN)
        stages = stage_changes(self._staged, k, self.step_ms, resend)
        close_rows, class_rows, open_rows = np.flatnonzero(closing), np.flatnonzero(classes), np.flatnonzero(opening)
        kbps = self.rate[class_rows]
        parts = [("gate", close_rows, (self.gate[close_rows],)),
                 ("class", class_rows, (np.minimum(kbps, self.share[class_rows]),
                                        np.maximum(kbps, self.over[class_rows]), self._bursts(class_rows, kbps))),
                 ("gate", open_rows, (self.gate[open_rows],))]
        # where each link's last operation of the round is, and what it passes before and after
        at = np.full(len(self.links), -1, dtype=np.int64)
        base = len(stages)
        at[class_rows] = base + len(close_rows) + np.arange(len(class_rows))
        at[close_rows] = base + np.arange(len(close_rows))
        at[open_rows] = base + len(close_rows) + len(class_rows) + np.arange(len(open_rows))
        before, after = _passing(was_rate, was_gate), _passing(self.rate, self.gate)
        sent = np.flatnonzero((at >= 0) & (before != UNKNOWN) & (before != after))
        count = len(stages) + len(close_rows) + len(class_rows) + len(open_rows)
        self._sent = (sent, before[sent], after[sent], at[sent], count)
        return Round(self.links, stages, parts)

    @property
    def reopens(self) -> bool:
        return bool(self.reopened)

    def take_sent(self):
        sent, self._sent = self._sent, None
        return sent

    def landed(self, first_ms: float, round_ms: float, sent=None) -> None:
        """``Stepper.landed``."""
        sent = self.take_sent() if sent is None else sent
        if sent is None:
            return
        rows, old, new, at, count = sent
        self._gain(rows, (first_ms + round_ms * (at + 1) / count) / 1000 * (old - new) / 8)

    def learn(self, nbytes, npackets) -> None:
        """``Stepper.learn``."""
        b, n = np.asarray(nbytes, dtype=np.int64), np.asarray(npackets, dtype=np.int64)
        known = self.seen[0] != UNKNOWN
        db, dn = b - self.seen[0], n - self.seen[1]
        took = known & (dn >= LEARN_PACKETS) & (db > 0)
        self.packet[took] = np.minimum(self.frame[took], db[took] / dn[took])
        self.packet[known & ~took & ((dn < 0) | (db < 0))] = np.nan
        self.seen = np.stack((b, n))
        self.learnt = int(np.count_nonzero(~np.isnan(self.packet)))

    def forget(self) -> None:
        """``Stepper.forget``."""
        self.rate[:] = self.gate[:] = UNKNOWN
        self.ahead[:] = 0.0
        self.counted[:] = UNKNOWN
        for link in self.links:
            link.stage_sent = None

    def shut_count(self) -> int:
        return int(np.count_nonzero(self.gate == SHUT))

    def held_count(self) -> int:
        return int(np.count_nonzero((self.gate != UNKNOWN) & (self.gate != OPEN) & (self.gate != SHUT)))


def _passing(rate, gate_bps):
    """``steps._passing_bps`` of every link (UNKNOWN: not known)."""
    out = np.where(gate_bps == SHUT, 0, np.where(gate_bps == OPEN, rate, gate_bps))
    return np.where((gate_bps == UNKNOWN) | ((rate == UNKNOWN) & (gate_bps == OPEN)), UNKNOWN, out)


def _span_bps(ring, k: int, rows, packet, step_ms: int):
    """``steps._span_bps`` of each of ``rows`` with its ``packet``, over the windows from
    ``k`` that ``ring`` holds: a row leaves the loop at the window that carries its packet."""
    out = np.zeros(len(rows), dtype=np.int64)
    at, need, t_ms = np.arange(len(rows)), packet * 8000, np.zeros(len(rows))
    for i in range(ring.count):
        r = ring.column(k + i)[rows[at]]
        width = step_ms / 2 if i == 0 else step_ms
        fits = r * width >= need
        if fits.any():
            out[at[fits]] = np.maximum(8, np.rint(packet[at[fits]] * 8000 / (t_ms[fits] + need[fits] / r[fits])))
            go = ~fits
            at, need, t_ms, r = at[go], need[go], t_ms[go], r[go]
            if not len(at):
                return out
        need, t_ms = need - r * width, t_ms + width
    out[at] = np.maximum(8, np.rint((packet[at] * 8000 - need) / t_ms))
    return out


class _Bursts:
    """``spec.model.Burst.bytes_at`` of every class row's rate, by the links' bursts."""

    def __init__(self, rates):
        kinds: dict = {}
        for i, r in enumerate(rates):
            kinds.setdefault((r.burst, r.mtu_bytes), []).append(i)
        self.groups = list(kinds)  # (burst, mtu) of each group
        self.of = np.zeros(len(rates), dtype=np.int64)  # each link's group
        for n, rows in enumerate(kinds.values()):
            self.of[rows] = n

    def __call__(self, rows, rate):
        out = np.zeros(len(rows), dtype=np.int64)
        which = self.of[rows]
        for n, (burst, mtu) in enumerate(self.groups):
            m = which == n
            r = rate[m]
            if burst.unit == "v03":
                out[m] = np.maximum(mtu + np.ceil(r / 8e6).astype(np.int64) + 1, r * int(burst.amount) // 8)
            elif burst.unit == "bytes":
                out[m] = int(burst.amount)
            else:
                out[m] = np.maximum(1, np.ceil(r * burst.amount / 8e6)).astype(np.int64)
        return out
