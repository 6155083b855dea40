"""The operations that carry a link's numbers: HTB classes (a pool's, a group's, a link's)
and the leaf qdisc under a class (netem, bfifo or pfifo, a managed queue, the tbf gate), with
netem's words.

These are what ``ops.Change`` sets in place when only numbers change (a trace step, a
re-apply at other rates).  The tree's frame (devices, root qdiscs, removals) is in ``ops``.

>>> FifoQdisc("eth0", 0x520100, 0x10000, "pfifo", 50).tc()
'qdisc add dev eth0 parent 52:100 handle 1: pfifo limit 50'
"""

from dataclasses import dataclass

from ..spec.model import LinkParams
from ..spec.names import batch_word
from ..spec.units import format_percent, format_rate, format_time
from .ops import _Tc, tc_handle


@dataclass(frozen=True)
class HtbClass(_Tc):
    dev: str
    parent: int
    classid: int
    rate_bps: int
    ceil_bps: int
    burst_bytes: int
    quantum_bytes: int
    mpu_bytes: int = 0
    # added to the length the device's size table gave a packet (a cohort whose link layer
    # is not the device's), and ATM cells: 48 bytes of it per 53 on the line
    overhead_bytes: int = 0
    atm: bool = False
    features = frozenset({"htb"})

    def with_rates(self, rate_bps: int, ceil_bps: int, burst_bytes: int) -> "HtbClass":
        """This class at other rates: what ``dataclasses.replace`` gives, made without
        ``__init__`` (a trace driver makes one for every link every step)."""
        new = object.__new__(type(self))
        fields = new.__dict__
        fields.update(self.__dict__)
        fields["rate_bps"], fields["ceil_bps"], fields["burst_bytes"] = rate_bps, ceil_bps, burst_bytes
        return new

    def tc(self) -> str:
        mpu = f" mpu {self.mpu_bytes}" if self.mpu_bytes else ""
        layer = (f" overhead {self.overhead_bytes}" if self.overhead_bytes else "") + (" linklayer atm" if self.atm else "")
        return (f"class add dev {batch_word(self.dev)} parent {tc_handle(self.parent)}"
                f" classid {tc_handle(self.classid)}"
                f" htb rate {format_rate(self.rate_bps)} ceil {format_rate(self.ceil_bps)}"
                f" burst {self.burst_bytes}b cburst {self.burst_bytes}b quantum {self.quantum_bytes}{mpu}{layer}")


def netem_args(p: LinkParams, limit_pkts: int) -> str:
    """tc's words for the netem stage of link parameters ``p``."""
    out = [f"limit {limit_pkts}"]
    if p.delay_us or p.jitter_us:
        out.append(f"delay {format_time(p.delay_us)}")
        if p.jitter_us:
            out.append(format_time(p.jitter_us))
            if p.delay_corr_pct:
                out.append(format_percent(p.delay_corr_pct))
    for word, pct, corr in (("loss", p.loss_pct, p.loss_corr_pct),
                            ("duplicate", p.duplicate_pct, p.duplicate_corr_pct),
                            ("corrupt", p.corrupt_pct, p.corrupt_corr_pct),
                            ("reorder", p.reorder_pct, p.reorder_corr_pct)):
        if pct:
            out.append(f"{word} {format_percent(pct)}")
            if corr:
                out.append(format_percent(corr))
        if word == "loss" and p.loss_model is not None:
            out.append(f"loss {p.loss_model.tc_words()}")
        if word == "corrupt" and p.slot is not None:
            out.append(p.slot.tc_words())
    return " ".join(out)


def netem_groups(p: LinkParams, rate_bps: int = 0) -> frozenset:
    """The optional parts a netem stage of ``p`` is sent with (beside its fixed options):
    "corr", "reorder", "corrupt", "slot", "slot_dist" (a slot drawn from a table), "rate".  The
    kernel keeps a part a change leaves out -- a slot's table too, and draws a plain slot's gaps
    from it -- so a stage can be changed in place only to one that sends every part it had.

    >>> sorted(netem_groups(LinkParams(corrupt_pct=1.0)))
    ['corrupt']"""
    delayed = bool(p.delay_us or p.jitter_us)
    corr = ((p.delay_corr_pct and delayed and p.jitter_us) or (p.loss_corr_pct and p.loss_pct)
            or (p.duplicate_corr_pct and p.duplicate_pct) or (p.reorder_corr_pct and p.reorder_pct)
            or (p.corrupt_corr_pct and p.corrupt_pct))
    return frozenset(name for name, on in (("corr", corr), ("reorder", p.reorder_pct), ("corrupt", p.corrupt_pct),
                                           ("slot", p.slot), ("slot_dist", p.slot is not None and p.slot.dist),
                                           ("rate", rate_bps)) if on)


def _leaf_add(leaf) -> str:
    """The words a leaf qdisc's line starts with: ``qdisc add dev DEV parent P handle H``."""
    return f"qdisc add dev {batch_word(leaf.dev)} parent {tc_handle(leaf.parent)} handle {tc_handle(leaf.handle)}"


@dataclass(frozen=True)
class NetemQdisc(_Tc):
    """A netem stage for the impairments of ``params``, queueing at most ``limit_pkts``;
    with ``rate_bps`` it also serializes packets at that rate, in order (a packet never
    leaves before the one ahead of it, whatever its jitter)."""

    dev: str
    parent: int
    handle: int
    params: LinkParams
    limit_pkts: int = 1000
    rate_bps: int = 0
    # its rate's packet overhead (signed: a cohort whose link layer is not the device's),
    # and cells (ATM: 48 bytes a cell, 5 more on the line)
    overhead_bytes: int = 0
    cell_bytes: int = 0
    cell_overhead_bytes: int = 0
    features = frozenset({"netem"})

    def tc(self) -> str:
        rate = f" rate {format_rate(self.rate_bps)}" if self.rate_bps else ""
        if self.rate_bps and (self.overhead_bytes or self.cell_bytes):
            rate += f" {self.overhead_bytes}" + (f" {self.cell_bytes} {self.cell_overhead_bytes}" if self.cell_bytes else "")
        return f"{_leaf_add(self)} netem {netem_args(self.params, self.limit_pkts)}{rate}"


@dataclass(frozen=True)
class FifoQdisc(_Tc):
    """A link's queue without netem: ``bfifo`` (a limit in bytes, as the link meters them)
    or ``pfifo`` (in packets)."""

    dev: str
    parent: int
    handle: int
    kind: str  # "bfifo" or "pfifo"
    limit: int

    @property
    def features(self) -> frozenset:
        return frozenset({self.kind})

    def tc(self) -> str:
        return f"{_leaf_add(self)} {self.kind} limit {self.limit}"


@dataclass(frozen=True)
class AqmQdisc(_Tc):
    """A link's managed queue: ``aqm`` (an ``aqm.Aqm`` with every parameter, ``Aqm.full``)
    holding at most ``limit_pkts`` (cake sizes its own memory)."""

    dev: str
    parent: int
    handle: int
    aqm: object
    limit_pkts: int

    @property
    def kind(self) -> str:
        return self.aqm.discipline

    @property
    def flows(self) -> int:
        return self.aqm.flows

    @property
    def features(self) -> frozenset:
        return frozenset({self.aqm.discipline})

    def tc(self) -> str:
        return f"{_leaf_add(self)} {self.aqm.tc_words(self.limit_pkts)}"


@dataclass(frozen=True)
class TbfQdisc(_Tc):
    """A token bucket as a traced link's leaf (``gate``): wide open it passes what the HTB
    class above sends, shut (a few bit/s) it holds the link's packets in its own byte
    queue of ``limit_bytes`` (tbf's bfifo) like a tunnel.  ``burst_bytes`` must hold the
    largest frame: tbf drops a larger packet on arrival."""

    dev: str
    parent: int
    handle: int
    rate_bps: int
    burst_bytes: int
    limit_bytes: int
    features = frozenset({"tbf"})

    def tc(self) -> str:
        return f"{_leaf_add(self)} tbf rate {format_rate(self.rate_bps)} burst {self.burst_bytes}b limit {self.limit_bytes}"
