"""Running a child process group with its output pumped through us, under a deadline;
ending a child process (``stop``).

Used by ``vm`` for vng/virtme-run/qemu: the output is piped (never handed
straight to a file: qemu reopens /proc/self/fd/1 and would write over the
caller's file from offset 0) and copied to the caller's streams or to a
line callback; on a deadline or an exception the whole process group is
stopped, TERM then KILL.
"""

from __future__ import annotations

import io
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End one child process: TERM, then KILL if it is still there after ``grace_s``; reaped."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kill_group(proc: subprocess.Popen) -> None:
    """Stop vng, virtme-run and qemu: the whole process group, TERM then KILL."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _writer(target) -> Callable[[bytes], None]:
    """A sink copying bytes to ``target``: a file descriptor, a file object with
    a descriptor, a text stream (e.g. ``io.StringIO``) or a binary stream."""
    if isinstance(target, int):
        fd = target
    else:
        try:
            fd = target.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
    if fd is not None:
        def write_fd(data: bytes) -> None:
            if not isinstance(target, int):
                target.flush()
            while data:
                data = data[os.write(fd, data):]
        return write_fd
    if isinstance(target, io.TextIOBase):
        return lambda data: target.write(data.decode("utf-8", "replace"))
    return target.write


def _line_sink(on_output: Callable[[str], None]):
    buf = bytearray()

    def sink(data: bytes) -> None:
        if not data:  # end of stream: flush the last partial line
            if buf:
                on_output(buf.decode("utf-8", "replace").rstrip("\r"))
                buf.clear()
            return
        buf.extend(data)
        *lines, rest = bytes(buf).split(b"\n")
        buf[:] = rest
        for line in lines:
            on_output(line.decode("utf-8", "replace").rstrip("\r"))
    return sink


def _pump(proc: subprocess.Popen, sinks: dict, deadline: float | None) -> bool:
    """Copy ``proc``'s piped streams to their sinks (``{pipe: sink(bytes)}``,
    ``sink(b"")`` at end of stream) until both close and ``proc`` exits.
    Returns False if the deadline passed first."""
    sel = selectors.DefaultSelector()
    for pipe, sink in sinks.items():
        sel.register(pipe, selectors.EVENT_READ, sink)
    try:
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                key.data(chunk)
                if not chunk:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
    try:
        proc.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True


def start_and_pump(cmd, *, cwd, env, stdout, stderr, on_output, deadline):
    """Start ``cmd`` in its own process group with its output piped through us
    (never handed straight to a file: qemu reopens /proc/self/fd/1 and would
    write over the caller's file from offset 0) and wait for it.
    Returns (proc, finished)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    if on_output is not None:
        sinks = {proc.stdout: _line_sink(on_output), proc.stderr: _line_sink(on_output)}
    else:
        out = _writer(sys.stdout if stdout is None else stdout)
        err = _writer(sys.stderr if stderr is None else stderr)
        sinks = {proc.stdout: lambda d: d and out(d), proc.stderr: lambda d: d and err(d)}
    try:
        finished = _pump(proc, sinks, deadline)
    except BaseException:
        kill_group(proc)
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    if not finished:
        kill_group(proc)
    return proc, finished
