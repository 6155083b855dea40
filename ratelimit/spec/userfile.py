"""Reading a file a user names (a trace, a schedule): a regular file, and only so much of it.

``read`` asks what the path is (``stat``), opens only a regular file (without blocking
and without taking a terminal) and asks again of the open file (``fstat``: the path may
have changed in between), so it refuses anything but a regular file before reading a
byte: ``/dev/zero`` would never end, a FIFO without a writer would block, a
directory has no text.  A regular file larger than the caller's limit is refused on
its size; one that grows while it is read is read to one byte past the limit, which
the caller refuses.  Every failure is one ``UsageError`` line starting with ``where``.
"""

import os
import stat

from ..errors import UsageError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
CHUNK_BYTES = 1 << 20


def kind(mode: int) -> str:
    """What a file that is not a regular file is, as a message says it ('' for a regular file)."""
    if stat.S_ISREG(mode):
        return ""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read(path, limit_bytes: int, where: str, what: str) -> bytes:
    """At most ``limit_bytes + 1`` bytes of the regular file ``path``; ``what`` says what
    such a file holds, for the message that refuses another kind of file."""
    try:
        other = kind(os.stat(path).st_mode)  # a socket cannot even be opened
        if not other:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise UsageError(f"{where}: cannot be opened ({e.strerror or e})") from None
    if other:
        raise UsageError(f"{where}: is {other}, not {what}")
    try:
        info = os.fstat(fd)  # what was opened, which may not be what was looked at
        other = kind(info.st_mode)
        if other:
            raise UsageError(f"{where}: is {other}, not {what}")
        if info.st_size > limit_bytes:
            raise UsageError(f"{where}: is {info.st_size:,} bytes, more than the {limit_bytes:,} it may hold")
        chunks, got = [], 0
        while got <= limit_bytes:
            try:
                chunk = os.read(fd, min(limit_bytes + 1 - got, CHUNK_BYTES))
            except OSError as e:
                raise UsageError(f"{where}: cannot be read ({e.strerror or e})") from None
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
