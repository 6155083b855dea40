"""Devices that merge received frames into "super-packets" before the router forwards them.

GRO (in software, by a device that receives through NAPI: a NIC, or a veth with
GRO turned on), GRO in hardware (``rx-gro-hw``: virtio-net's guest offloads, some
NICs) and LRO join consecutive frames of one TCP flow into one packet.  The
shaper meters packets, not frames: HTB lets a packet through whenever its bucket
is above zero and charges the link-layer overhead once per packet, and a policer
drops a packet bigger than its burst.  A 28.8k modem then passes several frames
at once (docs/lab.md measures it on the Vagrant lab's routers).

``merging(devices)`` reads, for devices of the calling thread's namespace, which
of those features are on: what ``ethtool -k`` shows, through the same
``SIOCETHTOOL`` ioctl.  Feature names come from the kernel (``ETH_SS_FEATURES``),
read once; then one ``ETHTOOL_GFEATURES`` per device.  ``tx_channels`` asks the same
ioctl how many tx queues a device sends on (``--queues``).
"""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
from array import array
from collections.abc import Iterable

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GFEATURES = 0x3A
ETHTOOL_GCHANNELS = 0x3C
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
IFREQ_BYTES = 40  # struct ifreq: 16-byte name, 24-byte union (here a pointer)

# The kernel's names of the features that merge (ethtool -k shows generic-receive-offload,
# rx-gro-hw, large-receive-offload), each with the word ethtool -K takes for it
ETHTOOL_K = {"rx-gro": "gro", "rx-gro-hw": "rx-gro-hw", "rx-lro": "lro"}
# Software GRO runs in the device that receives from NAPI.  A bridge, VLAN or IFB
# device reports rx-gro too, but gets what its lower device already merged or not.
RUNS_GRO = ("", "veth")  # link kinds: "" is a plain (hardware or virtio) device


def _ioctl(sock: socket.socket, name: str, buf: array) -> None:
    address, _ = buf.buffer_info()
    ifreq = struct.pack("16sP", name.encode(), address).ljust(IFREQ_BYTES, b"\0")
    fcntl.ioctl(sock, SIOCETHTOOL, ifreq)


def _feature_names(sock: socket.socket, name: str) -> list[str]:
    info = array("B", struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0))
    _ioctl(sock, name, info)
    (count,) = struct.unpack_from("=I", info, 16)
    strings = array("B", struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
                    + bytes(count * ETH_GSTRING_LEN))
    _ioctl(sock, name, strings)
    raw = strings.tobytes()[12:]
    return [raw[i:i + ETH_GSTRING_LEN].split(b"\0")[0].decode()
            for i in range(0, count * ETH_GSTRING_LEN, ETH_GSTRING_LEN)]


def _active(sock: socket.socket, name: str, count: int) -> int:
    """The device's active features as one bit mask (bit i: feature name i)."""
    blocks = (count + 31) // 32
    buf = array("B", struct.pack("=II", ETHTOOL_GFEATURES, blocks) + bytes(16 * blocks))
    _ioctl(sock, name, buf)
    words = struct.unpack_from(f"={4 * blocks}I", buf, 8)  # available, requested, active, never_changed
    return sum(words[4 * i + 2] << (32 * i) for i in range(blocks))


def tx_channels(name: str) -> int:
    """The tx queues device ``name`` of this thread's namespace sends on as its channels say
    (``ethtool -l``'s current combined + tx-only), or 0 where the driver reports none (the
    same ioctl; ``links.Links.tx_queues`` reads it for ``--queues``)."""
    buf = array("B", struct.pack("=9I", ETHTOOL_GCHANNELS, *[0] * 8))  # cmd, 4 maxima, 4 counts
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            _ioctl(sock, name, buf)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                return 0
            raise
    counts = struct.unpack_from("=4I", buf, 20)  # rx, tx, other, combined
    return counts[1] + counts[3]


def merging(devices: Iterable[tuple[str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """For (name, link kind) pairs of this thread's namespace: each device that merges
    received frames, with the features that do it (names from ``ETHTOOL_K``).  A device
    that cannot be asked (gone meanwhile, no ethtool support) is left out."""
    found = []
    bits: dict[str, int] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name, kind in devices:
            try:
                if not bits:
                    names = _feature_names(sock, name)
                    bits = {f: names.index(f) for f in ETHTOOL_K if f in names}
                active = _active(sock, name, max(bits.values(), default=0) + 1)
            except OSError:
                continue
            on = tuple(f for f, bit in bits.items()
                       if active >> bit & 1 and (f != "rx-gro" or kind in RUNS_GRO))
            if on:
                found.append((name, on))
    return found


def advice(found: list[tuple[str, tuple[str, ...]]]) -> str:
    """One line for the person applying links: where frames merge, and the commands that stop it."""
    devices = ", ".join(f"{name} ({', '.join(on)})" for name, on in found)
    commands = "; ".join(f"ethtool -K {name} " + " ".join(f"{ETHTOOL_K[f]} off" for f in on)
                         for name, on in found)
    return (f"warning: received frames are merged into bigger packets on {devices}; the links "
            f"meter each as one packet and pass it in a burst; for one packet per frame: {commands}")
