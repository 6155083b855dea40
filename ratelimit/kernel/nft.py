"""nftables, through its own tool: a reject's table checked, replaced whole, listed, its
counters read and removed (the rules are ``plan.reject``'s).  ``nft -f`` applies a file in
one kernel transaction, so a table is replaced whole or not at all.  Each call runs ``nft``
in the namespace (``ip netns exec``).

>>> command(None, "-c", "-f", "-")
['nft', '-c', '-f', '-']
"""

import json
import shutil
import subprocess

from ..errors import ApplyError, KernelMissing

NFT_MISSING = "--reject: needs nftables' nft command (apt install nftables)"


def command(netns: str | None, *args: str) -> list[str]:
    """The argv that runs ``nft args`` in ``netns`` (None: here)."""
    return (["ip", "netns", "exec", netns] if netns else []) + ["nft", *args]


def _run(netns: str | None, *args: str, text: str | None = None) -> subprocess.CompletedProcess:
    if shutil.which("nft") is None:
        raise KernelMissing(NFT_MISSING, "nftables")
    return subprocess.run(command(netns, *args), input=text, capture_output=True, text=True, check=False,
                          timeout=60)


def _message(proc: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("Error")]
    return (lines or [proc.stderr.strip() or f"exit status {proc.returncode}"])[0]


def check(netns: str | None, ruleset: str) -> None:
    """KernelMissing unless the kernel would take ``ruleset`` (``nft -c``: nothing changes)."""
    proc = _run(netns, "-c", "-f", "-", text=ruleset)
    if proc.returncode:
        raise KernelMissing(f"--reject: the kernel refused the rules ({_message(proc)}): it needs nf_tables "
                            "with reject (CONFIG_NFT_REJECT_INET)", "nftables")


def load(netns: str | None, ruleset: str) -> None:
    """Apply ``ruleset`` (``nft -f``), in one transaction; ApplyError if refused."""
    proc = _run(netns, "-f", "-", text=ruleset)
    if proc.returncode:
        raise ApplyError(f"--reject: nft refused the rules ({_message(proc)})")


def listed(netns: str | None, table: str) -> str | None:
    """The table as ``nft list`` prints it (what ``load`` takes back), or None if absent or
    nft is not installed."""
    if shutil.which("nft") is None:
        return None
    proc = _run(netns, "list", "table", "inet", table)
    return proc.stdout if proc.returncode == 0 else None


def counters(netns: str | None, table: str) -> dict[str, int]:
    """Packets each named counter of the table counted ({} without the table)."""
    if shutil.which("nft") is None:
        return {}
    proc = _run(netns, "-j", "list", "counters", "table", "inet", table)
    if proc.returncode:
        return {}
    items = json.loads(proc.stdout).get("nftables", [])
    return {c["name"]: int(c["packets"]) for c in (i.get("counter") for i in items) if c}
