"""cls_bpf: an eBPF program as a filter (``tc filter add ... bpf direct-action``), by file descriptor."""

from ..nl import TCA_KIND, TCA_OPTIONS, U32, attr_map, attr_str, attr_u32, attrs, cstr, hexof, nest

TCA_BPF_CLASSID, TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS, TCA_BPF_FLAGS_GEN, TCA_BPF_TAG, TCA_BPF_ID = \
    3, 6, 7, 8, 9, 10, 11
TCA_BPF_FLAG_ACT_DIRECT = 1  # the program's return value is the action (no classid, no actions list)
KIND = attr_str(TCA_KIND, "bpf")


def options(prog_fd: int, name: str) -> bytes:
    """TCA_KIND + TCA_OPTIONS of a direct-action filter running program ``prog_fd``, as tc
    sends for ``bpf da``: the descriptor, the name it shows, the flags."""
    return KIND + nest(TCA_OPTIONS, attr_u32(TCA_BPF_FD, prog_fd), attr_str(TCA_BPF_NAME, name),
                       attr_u32(TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT))


def decode(buf, s, e, names) -> tuple:
    """The static parts (name, flags, the program's tag), for snapshots; not its id, which
    every load of the same program changes."""
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_BPF_NAME:
            out.append(("name", cstr(buf, (ps, pe))))
        elif kind in (TCA_BPF_FLAGS, TCA_BPF_FLAGS_GEN, TCA_BPF_CLASSID) and pe - ps == 4:
            out.append((kind, U32.unpack_from(buf, ps)[0]))
        elif kind != TCA_BPF_ID:
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def program(buf, s, e) -> tuple[str, int] | None:
    """(name, program id) of the filter whose options are ``buf[s:e]``, or None."""
    opts = attr_map(buf, s, e)
    if TCA_BPF_ID not in opts:
        return None
    return cstr(buf, opts.get(TCA_BPF_NAME)), U32.unpack_from(buf, opts[TCA_BPF_ID][0])[0]
