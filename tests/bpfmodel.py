"""A Python model of the kernel running ratelimit's queue program (``queuepin.program``) on
one packet, for the instructions and helpers it uses.

Registers hold numbers or pointers (region, offset): the stack (``r10`` points at its
top), the ``__sk_buff`` context, a map value.  The packet is its network header onwards;
``linear`` says how much of it ``bpf_skb_load_bytes_relative`` can read before
``bpf_skb_pull_data`` (a packet whose headers are not all in the linear part).
"""

import struct

from ratelimit.plan.ebpf import ALU64, ALU_OPS, JMP, JUMP_OPS, LD, LDX, SIZES, ST, STX, X
from ratelimit.plan.queuepin import SKB_LEN, SKB_PRIORITY, SKB_PROTOCOL, SKB_QUEUE_MAPPING

STACK = 512
MASK = (1 << 64) - 1
_WIDTH = {SIZES["u8"]: 1, SIZES["u16"]: 2, SIZES["u32"]: 4, SIZES["u64"]: 8}
ETHERTYPES = {"ip": 0x0800, "ipv6": 0x86DD, "arp": 0x0806}


class Skb:
    def __init__(self, packet: bytes, ethertype: str, priority: int = 0, linear: int | None = None,
                 link_header: int = 14):
        self.packet, self.priority, self.queue_mapping = packet, priority, 0
        self.protocol = int.from_bytes(ETHERTYPES[ethertype].to_bytes(2, "big"), "little")
        self.linear = len(packet) if linear is None else linear
        self.link_header = link_header


def run(program, skb: Skb, entries: dict) -> int:
    """Run ``program`` (``ebpf.Program``) on ``skb`` with a map of ``entries`` (key bytes ->
    value bytes); returns r0 and leaves its writes in ``skb``."""
    insns = program.insns
    regs: list = [0] * 11
    regs[1], regs[10] = ("ctx", 0), ("stack", STACK)
    stack = bytearray(STACK)
    pc = 0
    while True:
        i = insns[pc]
        cls = i.code & 0x07
        pc += 1
        if i.map_ref is not None:
            regs[i.dst] = ("map", 0)
            pc += 1
        elif cls == LD:
            raise AssertionError("only map loads are modelled")
        elif cls == ALU64:
            op = i.code & 0xF0
            src = regs[i.src] if i.code & X else i.imm & MASK
            regs[i.dst] = _alu(op, regs[i.dst], src)
        elif cls == LDX:
            regs[i.dst] = _load(regs[i.src], i.off, _WIDTH[i.code & 0x18], stack, skb)
        elif cls in (ST, STX):
            value = regs[i.src] if cls == STX else i.imm & MASK
            _store(regs[i.dst], i.off, _WIDTH[i.code & 0x18], value, stack, skb)
        elif cls == JMP:
            op = i.code & 0xF0
            if op == 0x90:  # exit
                return regs[0]
            if op == 0x80:  # call
                regs[0] = _call(i.imm, regs, stack, skb, entries)
                regs[1:6] = [None] * 5
                continue
            if op == 0x00 or _compare(op, regs[i.dst], regs[i.src] if i.code & X else i.imm & MASK):
                pc += i.off
        else:
            raise AssertionError(f"instruction class {cls} not modelled")


def _alu(op, dst, src):
    if op == ALU_OPS["="]:
        return src
    if isinstance(dst, tuple):  # pointer arithmetic: the stack pointer plus an offset
        assert op == ALU_OPS["+="], "only additions move a pointer"
        return (dst[0], dst[1] + _signed(src))
    ops = {ALU_OPS["+="]: dst + src, ALU_OPS["-="]: dst - src, ALU_OPS["&="]: dst & src,
           ALU_OPS[">>="]: dst >> src, ALU_OPS["|="]: dst | src, ALU_OPS["<<="]: dst << src}
    return ops[op] & MASK


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _compare(op, a, b) -> bool:
    if isinstance(a, tuple):  # a map lookup's result against 0
        a = 1
    cmp = {JUMP_OPS["=="]: a == b, JUMP_OPS["!="]: a != b, JUMP_OPS["<="]: a <= b, JUMP_OPS[">="]: a >= b,
           JUMP_OPS["<"]: a < b, JUMP_OPS[">"]: a > b}
    return cmp[op]


def _load(ptr, off, width, stack, skb):
    region, base = ptr
    at = base + off
    if region == "stack":
        return int.from_bytes(stack[at:at + width], "little")
    if region == "value":
        return int.from_bytes(ptr_value(ptr)[off:off + width], "little")
    fields = {SKB_LEN: len(skb.packet) + skb.link_header, SKB_PROTOCOL: skb.protocol, SKB_PRIORITY: skb.priority,
              SKB_QUEUE_MAPPING: skb.queue_mapping}
    return fields[at]


_VALUES: dict = {}


def ptr_value(ptr) -> bytes:
    return _VALUES[ptr[1]]


def _store(ptr, off, width, value, stack, skb):
    region, base = ptr
    at = base + off
    if region == "stack":
        stack[at:at + width] = (value & ((1 << 8 * width) - 1)).to_bytes(width, "little")
        return
    assert region == "ctx", f"store into {region}"
    if at == SKB_PRIORITY:
        skb.priority = value
    elif at == SKB_QUEUE_MAPPING:
        skb.queue_mapping = value & 0xFFFF
    else:
        raise AssertionError(f"store to __sk_buff at {at}")


def _call(helper, regs, stack, skb, entries):
    if helper == 1:  # bpf_map_lookup_elem(map, key)
        _, at = regs[2]
        key = bytes(stack[at:at + 20])
        found = entries.get(key)
        if found is None:
            return 0
        _VALUES[id(found)] = found
        return ("value", id(found))
    if helper == 39:  # bpf_skb_pull_data(skb, len)
        if regs[2] > len(skb.packet) + skb.link_header:
            return -1 & MASK
        skb.linear = max(skb.linear, min(len(skb.packet), regs[2] - skb.link_header))
        return 0
    if helper == 68:  # bpf_skb_load_bytes_relative(skb, offset, to, len, BPF_HDR_START_NET)
        offset, (_, to), length = regs[2], regs[3], regs[4]
        assert regs[5] == 1
        if offset + length > skb.linear:
            stack[to:to + length] = bytes(length)
            return -14 & MASK
        stack[to:to + length] = skb.packet[offset:offset + length]
        return 0
    raise AssertionError(f"helper {helper} not modelled")


def value_of(data: bytes) -> tuple[int, int]:
    return struct.unpack("=II", data)
