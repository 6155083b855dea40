"""A plan as text a person can read and paste: ``script`` (shell, with ``tc -batch`` blocks,
every name quoted for where it stands) and ``tc_batch`` (the traffic-control lines alone).
"""

from ..spec.names import check_batch_name, shell_word
from .filters import DelFilter
from .ops import _Bpf, _Ip, _Tc


def script(ops, netns: str | None = None) -> str:
    """Shell text that performs ``ops`` in order: ``ip`` lines, and ``tc -batch`` blocks
    for the traffic-control operations between them; the eBPF map, its entries and program
    (several tx queues, ``queuepin``) as comments, which only ratelimit itself carries out.  Every name is quoted for where it
    stands (``names``); a device name no ``tc -batch`` line can carry is refused
    (UsageError) rather than printed."""
    ns = shell_word(netns) if netns else None
    ns_ip = f"ip -n {ns} " if ns else "ip "
    tc = f"tc -n {ns}" if ns else "tc"
    lines = ["#!/bin/sh", "set -e"]
    batch: list[str] = []
    seen: set[str] = set()

    def flush():
        if batch:
            lines.extend([f"{tc} -batch - <<'EOF'", *batch, "EOF"])
            batch.clear()

    for op in ops:
        if isinstance(op, _Ip):
            flush()
            lines += [ns_ip + s[3:] for s in op.shell()]
            continue
        if isinstance(op, _Bpf):  # ratelimit's own bpf(2) calls: shown, not runnable
            flush()
            lines += op.lines()
            continue
        for dev in (getattr(op, "dev", None), getattr(op, "redirect", None)):
            if dev and dev not in seen:
                check_batch_name(dev)
                seen.add(dev)
        if type(op) is DelFilter and (op.in_root_table or op.is_table):
            flush()
            lines += op.shell(tc)
            continue
        batch.append(op.tc())
    flush()
    return "\n".join(lines) + "\n"


def tc_batch(ops) -> str:
    """Only the ``tc -batch`` lines of ``ops`` (for benchmarks and tests)."""
    return "".join(op.tc() + "\n" for op in ops if isinstance(op, _Tc))
