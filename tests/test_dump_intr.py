"""Dumps the kernel flags as interrupted (NLM_F_DUMP_INTR) are read again, a few times.

The kernel sets the flag when its state changed while a multi-part dump was being
built; it cannot be provoked on demand, so a socket pair stands in for the kernel
here: it answers the channel's real dump requests with real netlink messages, some
of them flagged."""

import socket
import threading

import pytest

from ratelimit.errors import ConflictError
from ratelimit.kernel import nl
from ratelimit.kernel.readback import DUMP_ATTEMPTS, Reader
from ratelimit.kernel.transport import Channel, DumpInterrupted

INDEX = 7
MULTI = 0x2  # NLM_F_MULTI


def qdisc(seq, handle, parent, kind, flags=MULTI):
    body = nl.tcmsg(INDEX, handle, parent) + nl.attr_str(nl.TCA_KIND, kind)
    return nl.message(nl.RTM_NEWQDISC, flags, seq, body)


def done(seq, flags=MULTI):
    return nl.message(nl.NLMSG_DONE, flags, seq, b"\0\0\0\0")


class FakeKernel:
    """Answers each dump request on its end of a socket pair with ``answers[i](seq)``: a
    list of datagrams (the last answer repeats)."""

    def __init__(self, answers):
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.answers, self.requests = answers, []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                data = self.theirs.recv(65536)
            except OSError:
                return
            if not data:
                return
            _, kind, flags, seq, _ = nl.NLMSGHDR.unpack_from(data)
            self.requests.append((kind, flags))
            answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
            for datagram in answer(seq):
                self.theirs.send(datagram)

    def channel(self):
        chan = Channel.__new__(Channel)
        chan.sock, chan._seq, chan._dumping, chan._rbuf = self.ours, 1, False, bytearray(1 << 16)
        return chan

    def reader(self):
        reader = Reader.__new__(Reader)
        reader.netns, reader.chan = None, self.channel()
        return reader

    def close(self):
        self.theirs.close()
        self.ours.close()


def interrupted(seq):
    # the flag rides on a message in the middle of the dump, as the kernel sets it
    return [qdisc(seq, 0x520000, nl.TC_H_ROOT, "htb") + qdisc(seq, 0, nl.TC_H_INGRESS, "ingress", MULTI | nl.NLM_F_DUMP_INTR),
            done(seq)]


def whole(seq):
    return [qdisc(seq, 0x520000, nl.TC_H_ROOT, "htb"), qdisc(seq, 0xFFFF0000, nl.TC_H_INGRESS, "ingress"), done(seq)]


@pytest.fixture
def kernel_of():
    made = []

    def make(*answers):
        made.append(FakeKernel(list(answers)))
        return made[-1]
    yield make
    for k in made:
        k.close()


def test_a_flagged_dump_is_read_to_its_end_then_reported(kernel_of):
    kernel = kernel_of(interrupted)
    chan = kernel.channel()
    seen = []
    with pytest.raises(DumpInterrupted):
        for data, off, end in chan.dump(nl.dump_request(nl.RTM_GETQDISC, INDEX)):
            seen.append(nl.header(data, off)[1])
    assert seen == [0x520000, 0]  # every message was read: the socket holds nothing of it any more
    assert kernel.requests == [(nl.RTM_GETQDISC, nl.NLM_F_REQUEST | nl.NLM_F_DUMP)]
    assert not chan._dumping


def test_a_flag_on_the_done_message_counts_too(kernel_of):
    kernel = kernel_of(lambda seq: [qdisc(seq, 0x520000, nl.TC_H_ROOT, "htb"), done(seq, MULTI | nl.NLM_F_DUMP_INTR)])
    with pytest.raises(DumpInterrupted):
        list(kernel.channel().dump(nl.dump_request(nl.RTM_GETQDISC, INDEX)))


def test_an_unflagged_dump_is_whole(kernel_of):
    kernel = kernel_of(whole)
    got = [nl.header(d, o)[1] for d, o, _ in kernel.channel().dump(nl.dump_request(nl.RTM_GETQDISC, INDEX))]
    assert got == [0x520000, 0xFFFF0000]


def test_interrupted_dumps_are_read_again(kernel_of):
    kernel = kernel_of(interrupted, interrupted, whole)
    heads = kernel.reader()._qdisc_heads(INDEX)
    assert heads == [(nl.TC_H_ROOT, 0x520000, "htb"), (nl.TC_H_INGRESS, 0xFFFF0000, "ingress")]
    assert len(kernel.requests) == 3  # two interrupted reads, then the whole one


def test_a_dump_that_never_settles_is_one_clear_error(kernel_of):
    kernel = kernel_of(interrupted)
    with pytest.raises(ConflictError) as info:
        kernel.reader()._qdisc_heads(INDEX)
    assert len(kernel.requests) == DUMP_ATTEMPTS
    message = str(info.value)
    assert "\n" not in message and message.startswith("netlink: traffic control kept changing while ratelimit read it")
    assert info.value.exit_code == 6
