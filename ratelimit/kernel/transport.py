"""One rtnetlink socket in a network namespace: send batches, read acknowledgements and dumps.

The socket is made inside the namespace by pyroute2 (``netns.create_socket``
with ``flags=0``, so a missing namespace is an error and is never created) and
then used from here for the bulk path: many hand-packed messages per ``send``,
only the last asking for an acknowledgement.
"""

import errno as errnos
import os
import socket
import struct

from ..errors import ApplyError, NotFoundError, PermissionDenied, as_root
from .netns import in_netns
from .nl import (ERRNO, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP_INTR, NLM_F_ECHO, NLMSG_DONE,
                 NLMSG_ERROR, NLMSG_OVERRUN, NLMSGERR_ATTR_MSG, NLMSGHDR, SEQ_OFFSET, attrs, cstr)

SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # not in Python's socket module
NETNS_DIRS = ("/run/netns", "/var/run/netns")
SOCKET_BUFFER = 8 * 1024 * 1024
_FLAGS = struct.Struct("=H")
_LENGTH = struct.Struct("=I")
_CONTROL = frozenset({NLMSG_DONE, NLMSG_ERROR, NLMSG_OVERRUN})


class KernelError(Exception):
    """The kernel refused a request: errno and its extended-ack message."""

    def __init__(self, errno: int, message: str = ""):
        super().__init__(errno, message)
        self.errno, self.message = errno, message


class DumpInterrupted(Exception):
    """The kernel's state changed while it was being dumped (NLM_F_DUMP_INTR): read it again."""


def check_netns(netns: str) -> None:
    """Raise NotFoundError unless ``netns`` names an existing namespace (we never create one)."""
    if not netns or "/" in netns or netns in (".", "..") or \
            not any(os.path.exists(os.path.join(d, netns)) for d in NETNS_DIRS):
        raise NotFoundError(f"--netns: '{netns}' does not exist (see: ip netns list)")


def _configure(sock: socket.socket) -> socket.socket:
    try:
        for opt in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
            try:
                sock.setsockopt(SOL_NETLINK, opt, 1)
            except OSError:
                pass  # old kernels: plain acknowledgements
        for force, plain in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)
        sock.bind((0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def open_socket(netns: str | None) -> socket.socket:
    """A NETLINK_ROUTE socket in ``netns`` (this process stays where it is)."""
    args = (socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    if netns is None:
        return _configure(socket.socket(*args))
    check_netns(netns)
    try:
        sock = in_netns(netns, socket.socket, *args)
    except NotFoundError:
        raise NotFoundError(f"--netns: '{netns}' does not exist (see: ip netns list)") from None
    except PermissionDenied:
        raise PermissionDenied(f"--netns: entering '{netns}' needs root") from None
    return _configure(sock)


def set_ack(buf: bytearray, at: int) -> None:
    _FLAGS.pack_into(buf, at + 6, _FLAGS.unpack_from(buf, at + 6)[0] | NLM_F_ACK)


def extack(buf, off: int, length: int, flags: int) -> str:
    """The kernel's extended-ack message in an NLMSG_ERROR, if any."""
    if not flags & NLM_F_ACK_TLVS:
        return ""
    inner_len = NLMSGHDR.unpack_from(buf, off + 20)[0]
    start = off + 20 + (16 if flags & NLM_F_CAPPED else inner_len)
    for kind, s, e in attrs(buf, start, off + length):
        if kind == NLMSGERR_ATTR_MSG:
            return cstr(buf, (s, e)).strip()
    return ""


class Channel:
    """Sequence numbers, batched sends with one acknowledgement, and dumps, on one socket."""

    def __init__(self, netns: str | None = None):
        try:
            self.sock = open_socket(netns)
        except PermissionError:
            raise PermissionDenied(f"netlink needs root (run it with {as_root()})") from None
        self._seq = 1
        self._dumping = False
        self._rbuf = bytearray(1 << 20)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def next_seq(self, n: int = 1) -> int:
        """Reserve ``n`` consecutive sequence numbers (never wrapping inside a range)."""
        if self._seq + n >= 0x7FFFFFFF:
            self._seq = 1
        seq = self._seq
        self._seq += n
        return seq

    def _stamp(self, msg: bytes) -> tuple[bytearray, int]:
        msg = bytearray(msg)
        seq = self.next_seq()
        SEQ_OFFSET.pack_into(msg, 8, seq)
        return msg, seq

    def _recv(self) -> memoryview:
        try:
            n = self.sock.recv_into(self._rbuf)
        except OSError as e:
            if e.errno == errnos.ENOBUFS:
                raise ApplyError("netlink: replies were lost (receive buffer overflowed)") from None
            raise
        return memoryview(self._rbuf)[:n]

    def _send(self, data) -> None:
        if self._dumping:
            raise RuntimeError("netlink: a request was sent while a dump was being read")
        try:
            self.sock.send(data)
        except PermissionError:
            raise PermissionDenied(f"changing traffic control needs root (run it with {as_root()})") from None

    def exchange(self, data, first_seq: int, last_seq: int) -> list[tuple[int, int, str]]:
        """Send ``data`` (messages first_seq..last_seq, the last asking for an ack); return
        the failures as (seq, errno, kernel message), waiting for the last one's answer."""
        self._send(data)
        failures = []
        while True:
            buf = self._recv()
            off, n = 0, len(buf)
            while off + 16 <= n:
                length, kind, flags, seq, _ = NLMSGHDR.unpack_from(buf, off)
                if length < 16:
                    break
                if kind == NLMSG_ERROR and first_seq <= seq <= last_seq:
                    err = -ERRNO.unpack_from(buf, off + 16)[0]
                    if err:
                        failures.append((seq, err, extack(buf, off, length, flags)))
                    if seq == last_seq:
                        return failures
                off += (length + 3) & ~3

    def request(self, msg: bytes) -> None:
        """One message, acknowledged; raises KernelError when refused."""
        msg, seq = self._stamp(msg)
        set_ack(msg, 0)
        failures = self.exchange(msg, seq, seq)
        if failures:
            raise KernelError(failures[0][1], failures[0][2])

    def query(self, msg: bytes):
        """One GET request answered by at most one message: (buffer, offset, end) of the
        answer, or None when the kernel only acknowledged; raises KernelError when refused.

        NLM_F_ECHO is set: the kernel answers a qdisc GET with a notification, which
        reaches the sender only when it asks for its echo (measured on 6.18)."""
        msg, seq = self._stamp(msg)
        _FLAGS.pack_into(msg, 6, _FLAGS.unpack_from(msg, 6)[0] | NLM_F_ACK | NLM_F_ECHO)
        self._send(msg)
        found = None
        while True:
            data = bytes(self._recv())
            off, n = 0, len(data)
            while off + 16 <= n:
                length, kind, flags, mseq, _ = NLMSGHDR.unpack_from(data, off)
                if length < 16:
                    break
                if mseq == seq:
                    if kind == NLMSG_ERROR:
                        err = -ERRNO.unpack_from(data, off + 16)[0]
                        if err:
                            raise KernelError(err, extack(data, off, length, flags))
                        return found
                    if found is None:
                        found = (data, off, off + length)
                off += (length + 3) & ~3

    def dump(self, msg: bytes):
        """Yield (buffer, offset, end) of each message a dump request returns; raise
        DumpInterrupted at its end if the kernel flagged it as inconsistent."""
        for data, off, stop in self.dump_chunks(msg):
            while off < stop:
                length = _LENGTH.unpack_from(data, off)[0]
                yield data, off, off + length
                off += (length + 3) & ~3

    def dump_chunks(self, msg: bytes):
        """Yield (buffer, start, stop) for each run of a dump's messages in one receive
        buffer (``buffer[start:stop]`` holds whole messages, back to back, each padded to 4
        bytes), for readers that walk thousands of messages themselves; raise
        DumpInterrupted at the end if the kernel flagged the dump as inconsistent."""
        msg, seq = self._stamp(msg)
        self._send(msg)
        self._dumping = True
        try:
            yield from self._read_dump(seq)
        finally:
            self._dumping = False

    def _read_dump(self, seq: int):
        interrupted = False
        while True:
            data = bytes(self._recv())  # the caller may hold on to it while we read on
            off, n = 0, len(data)
            start = 0
            while off + 16 <= n:
                length, kind, flags, mseq, _ = NLMSGHDR.unpack_from(data, off)
                if length < 16:
                    break
                if mseq == seq and kind not in _CONTROL:
                    interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
                    off += (length + 3) & ~3
                    continue
                if off > start:
                    yield data, start, off
                if mseq == seq:
                    interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
                    if kind == NLMSG_DONE:
                        if interrupted:
                            raise DumpInterrupted()
                        return
                    if kind == NLMSG_ERROR:
                        err = -ERRNO.unpack_from(data, off + 16)[0]
                        if err:
                            raise KernelError(err, extack(data, off, length, flags))
                        return
                off += (length + 3) & ~3
                start = off
            if off > start:
                yield data, start, off


def strerror(errno: int) -> str:
    return os.strerror(errno) if errno else "failed"
