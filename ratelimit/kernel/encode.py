"""Plan operations in, netlink messages out: what ``tc`` sends for each operation's text.

Pure: no sockets.  Every message is what ``tc`` (iproute2 6.1) sends for the same
operation's text (``op.tc()``), attribute for attribute, so the kernel ends up
in the same state; the tests compare against ``tc``'s own bytes.  The
per-kind parts are in ``kinds/``; the differences from tc on purpose are
documented there (HTB's rate tables, netem's wide delays).
"""

from ..plan.shaping import AqmQdisc, FifoQdisc, HtbClass, NetemQdisc, TbfQdisc

from ..plan.filters import U32Filter
from .kinds import actions, aqm, bpf, fifo, htb, ingress, mirred, mq, netem, police, stab, tbf, u32
from .nl import (NLM_F_CREATE, NLM_F_EXCL, NLMSGHDR, RTM_DELQDISC, RTM_DELTCLASS, RTM_DELTFILTER, RTM_NEWQDISC,
                 RTM_NEWTCLASS, RTM_NEWTFILTER, TC_H_CLSACT_EGRESS, TC_H_INGRESS, TCA_KIND, TCMSG, attr_str, htons,
                 message, protocol_number, tcmsg)
from .rates import Clock, clock

_KIND_U32 = attr_str(TCA_KIND, "u32")
_ADD = NLM_F_CREATE | NLM_F_EXCL


class Encoder:
    """Packs plan operations as netlink messages for one namespace.

    ``ifindex(name)`` resolves device names (raising for unknown ones); the
    caches below make identical actions and filter heads cost one dictionary
    lookup after the first, and pack a class's options from the rates alone.
    Their keys leave the rates out: a trace driver's encoder lives for hours and
    sets a new rate on every link every step.
    """

    def __init__(self, ifindex, clk: Clock | None = None, htb_tables: bool = False):
        self.ifindex = ifindex
        self.clock = clk or clock()
        self.htb_tables = htb_tables
        self._act: dict = {}
        self._htb: dict = {}
        self._head: dict = {}
        self._u32 = u32.FilterPacker()

    # -- qdiscs

    def htb_qdisc(self, op, seq: int, flags: int) -> bytes:
        body = tcmsg(self.ifindex(op.dev), op.handle, op.parent) + htb.qdisc_options(op.default_minor)
        if op.stab is not None:
            body += stab.options(op.stab)
        return message(RTM_NEWQDISC, flags | _ADD, seq, body)

    def ingress_qdisc(self, op, seq: int, flags: int) -> bytes:
        return message(RTM_NEWQDISC, flags | _ADD, seq, ingress.body(self.ifindex(op.dev)))

    def clsact_qdisc(self, op, seq: int, flags: int) -> bytes:
        return message(RTM_NEWQDISC, flags | _ADD, seq, ingress.body(self.ifindex(op.dev), "clsact"))

    def mq_qdisc(self, op, seq: int, flags: int) -> bytes:
        return message(RTM_NEWQDISC, flags | _ADD, seq, mq.body(self.ifindex(op.dev), op.handle))

    def del_qdisc(self, op, seq: int, flags: int) -> bytes:
        if op.parent == TC_H_INGRESS:  # tc names the kind and handle for "del ... ingress" (or clsact)
            body = ingress.body(self.ifindex(op.dev), op.kind)
        else:
            body = tcmsg(self.ifindex(op.dev), 0, op.parent)
        return message(RTM_DELQDISC, flags, seq, body)

    def netem_qdisc(self, op, seq: int, flags: int, add: int = _ADD) -> bytes:
        body = (tcmsg(self.ifindex(op.dev), op.handle, op.parent)
                + netem.options(op.params, op.limit_pkts, self.clock, op.rate_bps,
                                (op.overhead_bytes, op.cell_bytes, op.cell_overhead_bytes)))
        return message(RTM_NEWQDISC, flags | add, seq, body)

    def fifo_qdisc(self, op, seq: int, flags: int, add: int = _ADD) -> bytes:
        body = tcmsg(self.ifindex(op.dev), op.handle, op.parent) + fifo.options(op.kind, op.limit)
        return message(RTM_NEWQDISC, flags | add, seq, body)

    def aqm_qdisc(self, op, seq: int, flags: int, add: int = _ADD) -> bytes:
        body = tcmsg(self.ifindex(op.dev), op.handle, op.parent) + aqm.options(op.aqm, op.limit_pkts, change=not add)
        return message(RTM_NEWQDISC, flags | add, seq, body)

    def tbf_qdisc(self, op, seq: int, flags: int, add: int = _ADD) -> bytes:
        """A traced link's gate; with ``htb_tables`` (tc's own messages) its rate table too."""
        body = (tcmsg(self.ifindex(op.dev), op.handle, op.parent)
                + tbf.options(op.rate_bps, op.burst_bytes, op.limit_bytes, self.clock, self.htb_tables))
        return message(RTM_NEWQDISC, flags | add, seq, body)

    # -- classes

    def htb_class(self, op, seq: int, flags: int, add: int = _ADD) -> bytes:
        key = (op.quantum_bytes, op.mpu_bytes, op.overhead_bytes, op.atm)
        options = self._htb.get(key)
        if options is None:
            options = self._htb[key] = htb.class_packer(*key, self.clock, self.htb_tables)
        body = tcmsg(self.ifindex(op.dev), op.classid, op.parent) + options(op.rate_bps, op.ceil_bps, op.burst_bytes)
        return message(RTM_NEWTCLASS, flags | add, seq, body)

    def del_class(self, op, seq: int, flags: int) -> bytes:
        return message(RTM_DELTCLASS, flags, seq, tcmsg(self.ifindex(op.dev), op.classid, 0))

    # -- u32 filters

    def _filter_head(self, dev, parent, prio, protocol) -> tuple:
        key = (dev, parent, prio, protocol)
        head = self._head.get(key)
        if head is None:
            head = self._head[key] = (self.ifindex(dev), parent, (prio << 16) | htons(protocol_number(protocol)))
        return head

    def u32_table(self, op, seq: int, flags: int) -> bytes:
        ifindex, parent, info = self._filter_head(op.dev, op.parent, op.prio, op.protocol)
        body = TCMSG.pack(0, ifindex, op.ht << 20, parent, info) + _KIND_U32 + u32.table_options(op.divisor)
        return message(RTM_NEWTFILTER, flags | _ADD, seq, body)

    def del_filter(self, op, seq: int, flags: int, msg_type: int = RTM_DELTFILTER) -> bytes:
        """``tc filter del``: the u32 node or table ``op.handle``, or (0) the whole list
        (``msg_type`` RTM_GETTFILTER: ``tc filter get`` of the same)."""
        ifindex, parent, info = self._filter_head(op.dev, op.parent, op.prio, op.protocol)
        body = TCMSG.pack(0, ifindex, op.handle, parent, info) + (_KIND_U32 if op.handle else b"")
        return message(msg_type, flags, seq, body)

    def _actions(self, pol, redirect) -> bytes:
        key = (pol, redirect)
        act = self._act.get(key)
        if act is None:
            acts = []
            if pol is not None:
                acts.append(actions.action("police", police.options(pol, self.clock)))
            if redirect is not None:
                acts.append(actions.action("mirred", mirred.options(self.ifindex(redirect))))
            act = self._act[key] = actions.action_list(u32.TCA_U32_ACT, acts) if acts else b""
        return act

    def u32_filter(self, op, seq: int, flags: int, add: int = _ADD) -> bytes:
        ifindex, parent, info = self._filter_head(op.dev, op.parent, op.prio, op.protocol)
        acts = self._actions(op.police, op.redirect) if (op.police is not None or op.redirect is not None) else b""
        body = TCMSG.pack(0, ifindex, op.handle, parent, info) + _KIND_U32 + self._u32.options(op, acts)
        return NLMSGHDR.pack(16 + len(body), RTM_NEWTFILTER, flags | add, seq, 0) + body

    def bpf_filter(self, dev: str, prio: int, handle: int, prog_fd: int, name: str, seq: int, flags: int) -> bytes:
        """A direct-action program ``prog_fd`` on ``dev``'s clsact egress hook, for every
        protocol: added, or put in place of the program of the filter there (no NLM_F_EXCL:
        cls_bpf swaps the program in one step)."""
        body = TCMSG.pack(0, self.ifindex(dev), handle, TC_H_CLSACT_EGRESS, (prio << 16) | htons(protocol_number("all")))
        return message(RTM_NEWTFILTER, flags | NLM_F_CREATE, seq, body + bpf.options(prog_fd, name))

    # -- changes in place

    def change(self, op, seq: int, flags: int) -> bytes:
        """``op.op``'s message without NLM_F_CREATE | NLM_F_EXCL (what ``tc ... change``
        sends): the kernel changes the object with that handle, or answers ENOENT."""
        return _CHANGEABLE[type(op.op)](self, op.op, seq, flags, 0)


_CHANGEABLE = {HtbClass: Encoder.htb_class, NetemQdisc: Encoder.netem_qdisc, FifoQdisc: Encoder.fifo_qdisc,
               AqmQdisc: Encoder.aqm_qdisc, TbfQdisc: Encoder.tbf_qdisc, U32Filter: Encoder.u32_filter}
