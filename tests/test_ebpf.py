"""The eBPF assembler: bytes as the kernel's instruction format has them, labels, the listing."""

import struct

import pytest

from ratelimit.plan.ebpf import FP, R0, R1, R2, R6, Asm, AsmError


def _insn(code, dst=0, src=0, off=0, imm=0) -> bytes:
    return struct.pack("<BBhi", code, src << 4 | dst, off, imm)


def test_each_instruction_is_the_kernels_encoding():
    a = Asm()
    a.mov(R6, R1)  # BPF_ALU64 | BPF_MOV | BPF_X
    a.mov(R0, 0)  # BPF_ALU64 | BPF_MOV | BPF_K
    a.alu("&=", R1, 0x0F)
    a.alu("+=", R2, -64)
    a.load("u32", R1, R6, 16)  # BPF_LDX | BPF_W | BPF_MEM
    a.load("u16", R1, FP, -58)
    a.store("u64", FP, -24, 0)  # BPF_ST | BPF_DW | BPF_MEM
    a.store("u32", R6, 32, R1)  # BPF_STX | BPF_W | BPF_MEM
    a.call(1)
    a.exit()
    assert a.assemble().encode({}) == b"".join([
        _insn(0xBF, 6, 1), _insn(0xB7, 0, imm=0), _insn(0x57, 1, imm=15), _insn(0x07, 2, imm=-64),
        _insn(0x61, 1, 6, 16), _insn(0x69, 1, 10, -58), _insn(0x7A, 10, off=-24), _insn(0x63, 6, 1, 32),
        _insn(0x85, imm=1), _insn(0x95)])


def test_jumps_go_to_their_labels_forwards_and_backwards():
    a = Asm()
    a.label("top")
    a.jump("==", R1, 8, "end")  # +2: over the next two
    a.jump("!=", R1, R2, "top")  # -2: back to the first
    a.goto("end")
    a.label("end")
    a.exit()
    code = a.assemble().encode({})
    assert code[:8] == _insn(0x15, 1, off=2, imm=8)
    assert code[8:16] == _insn(0x5D, 1, 2, off=-2)
    assert code[16:24] == _insn(0x05, off=0)


def test_a_map_load_takes_two_instructions_and_the_descriptor_given():
    a = Asm()
    a.load_map(R1, "queues")
    a.exit()
    program = a.assemble()
    assert program.encode({"queues": 7}) == _insn(0x18, 1, 1, imm=7) + _insn(0) + _insn(0x95)
    assert program.listing() == ["   0: r1 = map[queues] ll", "   2: exit"]


def test_an_unsigned_immediate_is_stored_as_the_kernel_reads_it():
    a = Asm()
    a.jump("==", R1, 0xDD86, "x")
    a.alu("&=", R1, 0xFFFFFFFF)
    a.label("x")
    a.exit()
    code = a.assemble().encode({})
    assert struct.unpack_from("<i", code, 4)[0] == 0xDD86
    assert struct.unpack_from("<i", code, 12)[0] == -1


def test_the_listing_reads_like_the_verifiers():
    a = Asm()
    a.mov(R6, R1)
    a.jump(">=", R1, 128, "out")
    a.store("u32", FP, -20, R1)
    a.call(68, "bpf_skb_load_bytes_relative")
    a.label("out")
    a.mov(R0, 0)
    a.exit()
    assert a.assemble().listing() == [
        "   0: r6 = r1", "   1: if r1 >= 128 goto out", "   2: *(u32 *)(r10 -20) = r1",
        "   3: call bpf_skb_load_bytes_relative", "out:", "   4: r0 = 0", "   5: exit"]


@pytest.mark.parametrize("build, message", [
    (lambda a: a.goto("nowhere"), "unknown label"),
    (lambda a: (a.label("x"), a.label("x")), "defined twice"),
    (lambda a: a.store("u32", FP, 1 << 15, 0), "out of range"),
])
def test_a_program_that_cannot_be_assembled_says_why(build, message):
    a = Asm()
    with pytest.raises(AsmError, match=message):
        build(a)
        a.assemble()
