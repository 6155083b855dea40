"""The UDP sender of the per-packet benchmark: ``blast.c`` compiled on first use,
or a pure-Python loop when there is no C compiler (slower: it then measures
more of the sender and less of the router, which flattens the ratios).

``python -m bench.blast ADDRESS PORT PAYLOAD SECONDS`` is the Python sender;
both print ``SENT ERRORS ELAPSED_S``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

SOURCE = Path(__file__).with_name("blast.c")
SHARED = Path(__file__).with_name("udpsend.h")  # what the senders include
CACHE = Path(os.environ.get("XDG_CACHE_HOME", "/tmp")) / "ratelimit-bench"


def compiled(source: Path = SOURCE) -> str | None:
    """Path of a program compiled from ``source`` (built once per version of it and of
    ``udpsend.h``), or None."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not source.exists():
        return None
    digest = hashlib.sha256(source.read_bytes() + SHARED.read_bytes()).hexdigest()[:12]
    exe = CACHE / f"{source.stem}-{digest}"
    if exe.exists():
        return str(exe)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_name(exe.name + f".{os.getpid()}")
    r = subprocess.run([cc, "-O2", "-o", str(tmp), str(source)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return None
    tmp.replace(exe)
    return str(exe)


def argv(address: str, port: int, payload: int, seconds: float) -> tuple[list[str], str]:
    """The sender's command line and its kind ('c' or 'python')."""
    exe = compiled()
    args = [address, str(port), str(payload), f"{seconds:g}"]
    if exe:
        return [exe, *args], "c"
    return [sys.executable, "-m", "bench.blast", *args], "python"


def parse(line: str) -> tuple[int, int, float]:
    """``"SENT ERRORS ELAPSED"`` -> (sent, errors, elapsed_s)."""
    sent, errors, elapsed = line.split()
    return int(sent), int(errors), float(elapsed)


def _python_sender(address: str, port: int, payload: int, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((address, port))
    data = bytes(payload)
    sent = errors = 0
    start = time.monotonic()
    stop = start + seconds
    send = s.send
    while True:
        for _ in range(64):
            try:
                send(data)
                sent += 1
            except OSError:
                errors += 1
        t = time.monotonic()
        if t >= stop:
            break
    print(sent, errors, f"{t - start:.6f}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print("usage: python -m bench.blast ADDRESS PORT PAYLOAD_BYTES SECONDS", file=sys.stderr)
        sys.exit(2)
    _python_sender(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
