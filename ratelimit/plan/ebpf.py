"""A small eBPF assembler, pure: instructions built in Python, jumps to named labels,
the bytes the kernel loads (``Program.encode``) and a readable listing (``Program.listing``,
in the kernel verifier's notation) for ``--dry-run``.  No clang: ratelimit's one program
(``queuepin``) is written with it.

    asm = Asm()
    asm.mov(R6, R1)
    asm.jump("!=", R2, 0, "out")
    asm.label("out")
    asm.mov(R0, 0)
    asm.exit()
    program = asm.assemble()

A map is named by a reference of the caller's choosing (``Asm.load_map``); ``encode`` is
given the file descriptor of each.  Instruction format and opcodes: the kernel's
Documentation/bpf/standardization/instruction-set.rst.
"""

import struct
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Reg:
    n: int

    def __str__(self) -> str:
        return f"r{self.n}"


R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 = (Reg(i) for i in range(11))
FP = R10  # the frame pointer: the stack is below it

# classes, sizes, modes, sources
LD, LDX, ST, STX, ALU64, JMP = 0x00, 0x01, 0x02, 0x03, 0x07, 0x05
SIZES = {"u32": 0x00, "u16": 0x08, "u8": 0x10, "u64": 0x18}
IMM, MEM = 0x00, 0x60
K, X = 0x00, 0x08
ALU_OPS = {"+=": 0x00, "-=": 0x10, "*=": 0x20, "/=": 0x30, "|=": 0x40, "&=": 0x50, "<<=": 0x60, ">>=": 0x70,
           "%=": 0x90, "^=": 0xA0, "=": 0xB0}
JUMP_OPS = {"==": 0x10, ">": 0x20, ">=": 0x30, "&": 0x40, "!=": 0x50, "s>": 0x60, "s>=": 0x70, "<": 0xA0,
            "<=": 0xB0, "s<": 0xC0, "s<=": 0xD0}
JA, CALL, EXIT = 0x00, 0x80, 0x90
PSEUDO_MAP_FD = 1  # src_reg of a 64-bit immediate load that names a map by file descriptor

INSN = struct.Struct("=BBhi")  # code, dst/src registers, offset, immediate
_LOW_NIBBLE_DST = sys.byteorder == "little"  # the kernel's bitfield order for dst_reg:4, src_reg:4


@dataclass(frozen=True)
class Insn:
    """One instruction; ``target`` names the label a jump goes to (its ``off`` is filled
    in by ``assemble``), ``map_ref`` the map a 64-bit immediate load takes the address of
    (its first half; the second half has ``code`` 0)."""

    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0
    target: str | None = None
    map_ref: str | None = None

    def pack(self, imm: int | None = None) -> bytes:
        regs = (self.src << 4 | self.dst) if _LOW_NIBBLE_DST else (self.dst << 4 | self.src)
        return INSN.pack(self.code, regs, self.off, self.imm if imm is None else imm)


class AsmError(ValueError):
    """A program that cannot be assembled (an unknown label, an operand out of range): a bug."""


class Asm:
    """Builds a program instruction by instruction; ``assemble`` resolves the labels."""

    def __init__(self):
        self._insns: list[Insn] = []
        self._labels: dict[str, int] = {}
        self._helpers: dict[int, str] = {}

    def label(self, name: str) -> None:
        if name in self._labels:
            raise AsmError(f"label {name!r} defined twice")
        self._labels[name] = len(self._insns)

    def _emit(self, insn: Insn) -> None:
        if not -(1 << 15) <= insn.off < 1 << 15 or not -(1 << 31) <= insn.imm < 1 << 32:
            raise AsmError(f"operand out of range in {insn}")
        if insn.imm >= 1 << 31:  # an unsigned 32-bit value, as the signed field holds it
            insn = Insn(insn.code, insn.dst, insn.src, insn.off, insn.imm - (1 << 32), insn.target, insn.map_ref)
        self._insns.append(insn)

    def alu(self, op: str, dst: Reg, src: "Reg | int") -> None:
        """``dst op= src`` on 64 bits (``op`` "=", "+=", "&=", ">>=", ...)."""
        code = ALU64 | ALU_OPS[op]
        if isinstance(src, Reg):
            self._emit(Insn(code | X, dst.n, src.n))
        else:
            self._emit(Insn(code | K, dst.n, imm=src))

    def mov(self, dst: Reg, src: "Reg | int") -> None:
        self.alu("=", dst, src)

    def load(self, size: str, dst: Reg, src: Reg, off: int) -> None:
        """``dst = *(size *)(src + off)``."""
        self._emit(Insn(LDX | SIZES[size] | MEM, dst.n, src.n, off))

    def store(self, size: str, dst: Reg, off: int, src: "Reg | int") -> None:
        """``*(size *)(dst + off) = src``."""
        if isinstance(src, Reg):
            self._emit(Insn(STX | SIZES[size] | MEM, dst.n, src.n, off))
        else:
            self._emit(Insn(ST | SIZES[size] | MEM, dst.n, off=off, imm=src))

    def jump(self, op: str, dst: Reg, src: "Reg | int", target: str) -> None:
        """``if dst op src goto target`` (64-bit compare; "s<" and the like signed)."""
        code = JMP | JUMP_OPS[op]
        if isinstance(src, Reg):
            self._emit(Insn(code | X, dst.n, src.n, target=target))
        else:
            self._emit(Insn(code | K, dst.n, imm=src, target=target))

    def goto(self, target: str) -> None:
        self._emit(Insn(JMP | JA, target=target))

    def call(self, helper: int, name: str = "") -> None:
        """Call kernel helper number ``helper`` (arguments in r1-r5, result in r0)."""
        if name:
            self._helpers[helper] = name
        self._emit(Insn(JMP | CALL, imm=helper))

    def exit(self) -> None:
        self._emit(Insn(JMP | EXIT))

    def load_map(self, dst: Reg, map_ref: str) -> None:
        """``dst = the map map_ref`` (two instructions; the descriptor is given to ``encode``)."""
        self._emit(Insn(LD | SIZES["u64"] | IMM, dst.n, PSEUDO_MAP_FD, map_ref=map_ref))
        self._emit(Insn(0))

    def assemble(self) -> "Program":
        out = []
        for at, insn in enumerate(self._insns):
            if insn.target is not None:
                if insn.target not in self._labels:
                    raise AsmError(f"jump to unknown label {insn.target!r}")
                off = self._labels[insn.target] - at - 1
                if not -(1 << 15) <= off < 1 << 15:
                    raise AsmError(f"jump to {insn.target!r} is too far")
                insn = Insn(insn.code, insn.dst, insn.src, off, insn.imm, insn.target)
            out.append(insn)
        return Program(tuple(out), tuple(sorted((at, name) for name, at in self._labels.items())),
                       tuple(sorted(self._helpers.items())))


@dataclass(frozen=True)
class Program:
    insns: tuple
    labels: tuple  # ((instruction index, name), ...)
    helpers: tuple  # ((number, name), ...): what the listing calls them

    def encode(self, maps: dict) -> bytes:
        """The bytes to load, each map reference replaced by its descriptor (``maps``)."""
        return b"".join(i.pack(maps[i.map_ref]) if i.map_ref is not None else i.pack() for i in self.insns)

    def listing(self) -> list[str]:
        """One line per instruction, in the verifier's notation, each label on a line of its own."""
        labels: dict[int, list[str]] = {}
        for at, name in self.labels:
            labels.setdefault(at, []).append(name)
        helpers = dict(self.helpers)
        out = []
        skip = False
        for at, insn in enumerate(self.insns):
            out += [f"{name}:" for name in labels.get(at, ())]
            if skip:  # the second half of a 64-bit immediate load
                skip = False
                continue
            skip = insn.map_ref is not None
            out.append(f"{at:4}: {_text(insn, helpers)}")
        return out


def _text(i: Insn, helpers: dict) -> str:
    cls, size = i.code & 0x07, i.code & 0x18
    sizes = {v: k for k, v in SIZES.items()}
    dst, src = f"r{i.dst}", f"r{i.src}"
    off = f"{i.off:+d}"
    if i.map_ref is not None:
        return f"{dst} = map[{i.map_ref}] ll"
    if cls == ALU64:
        op = next(k for k, v in ALU_OPS.items() if v == i.code & 0xF0)
        return f"{dst} {op} {src if i.code & X else _imm(i.imm)}"
    if cls == LDX:
        return f"{dst} = *({sizes[size]} *)({src} {off})"
    if cls == STX:
        return f"*({sizes[size]} *)({dst} {off}) = {src}"
    if cls == ST:
        return f"*({sizes[size]} *)({dst} {off}) = {_imm(i.imm)}"
    op = i.code & 0xF0
    if op == EXIT:
        return "exit"
    if op == CALL:
        return f"call {helpers.get(i.imm, i.imm)}"
    target = i.target or f"{i.off:+d}"
    if op == JA:
        return f"goto {target}"
    cmp = next(k for k, v in JUMP_OPS.items() if v == op)
    return f"if {dst} {cmp} {src if i.code & X else _imm(i.imm)} goto {target}"


def _imm(value: int) -> str:
    return str(value) if -256 < value < 256 else hex(value)
