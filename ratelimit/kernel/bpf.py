"""bpf(2) through ctypes: hash maps, their entries, programs, and finding them again by id.

The only code that makes or changes eBPF objects.  They are global (not per network
namespace) and live while something holds them: a map while a file descriptor or a loaded
program refers to it, a program while a descriptor or an attached filter does.  ratelimit
pins nothing in bpffs (it is not always mounted, and ``ip netns exec`` mounts a /sys of its
own): a program lives as long as its filter on the device's clsact qdisc, and its map as
long as the program; a later run finds the map through the filter's program id
(``map_of_program``).  Attribute layouts: include/uapi/linux/bpf.h (``union bpf_attr``).
"""

import ctypes
import errno as errnos
import os
import platform
import struct

from ..errors import KernelMissing, PermissionDenied

_SYSCALL = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "riscv64": 280, "ppc64le": 361, "s390x": 351,
            "i686": 357, "loongarch64": 280}
MAP_CREATE, MAP_UPDATE_ELEM = 0, 2
PROG_LOAD, PROG_GET_FD_BY_ID, MAP_GET_FD_BY_ID, OBJ_GET_INFO_BY_FD = 5, 13, 14, 15
MAP_UPDATE_BATCH = 26
MAP_TYPE_HASH, PROG_TYPE_SCHED_CLS = 1, 3
ATTR_BYTES = 144  # union bpf_attr as this code fills it (the kernel takes a shorter one, zero-padded)
LOG_BYTES = 1 << 16
PROG_INFO = struct.Struct("=II8sIIQQQIIQ")  # type id tag jited_len xlated_len jited xlated load_time uid nr_map_ids map_ids

_libc = None


class BpfError(OSError):
    """The kernel refused a bpf(2) command; ``log`` is the verifier's, for a program."""

    def __init__(self, err: int, what: str, log: str = "", done: int = 0):
        super().__init__(err, f"{what}: {os.strerror(err)}" + (f" ({log.strip()[-300:]})" if log else ""))
        self.log, self.done = log, done  # done: the entries of a batch the kernel took before refusing


def _bpf(cmd: int, attr: bytes, what: str) -> int:
    return _bpf_buffer(cmd, ctypes.create_string_buffer(attr.ljust(ATTR_BYTES, b"\0"), ATTR_BYTES), what)


def _bpf_buffer(cmd: int, buf, what: str) -> int:
    """bpf(2) on the attributes in ``buf`` (a ctypes buffer the kernel may write back into)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise KernelMissing(f"bpf: ratelimit does not know the bpf(2) system call on {platform.machine()}; "
                            "use --queues 1", "bpf")
    result = _libc.syscall(number, cmd, buf, ATTR_BYTES)
    if result < 0:
        err = ctypes.get_errno()
        if err == errnos.ENOSYS:
            raise KernelMissing("bpf: this kernel has no bpf(2) (CONFIG_BPF_SYSCALL); use --queues 1", "bpf")
        if err == errnos.EPERM:
            raise PermissionDenied(f"bpf: {what} needs root (CAP_BPF and CAP_NET_ADMIN)")
        raise BpfError(err, what)
    return result


def _name(text: str) -> bytes:
    return text.encode()[:15].ljust(16, b"\0")


def map_create(key_bytes: int, value_bytes: int, entries: int, name: str) -> int:
    """A new hash map; its file descriptor."""
    attr = struct.pack("=IIIIIII16s", MAP_TYPE_HASH, key_bytes, value_bytes, max(1, entries), 0, 0, 0, _name(name))
    return _bpf(MAP_CREATE, attr, f"creating a map of {entries} entries")


def map_update(fd: int, key: bytes, value: bytes) -> None:
    """Add or replace one entry."""
    k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(value, len(value))
    _bpf(MAP_UPDATE_ELEM, struct.pack("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0),
         "adding a map entry")


def map_update_batch(fd: int, keys: bytes, values: bytes, count: int) -> int:
    """Add or replace ``count`` entries (``keys`` and ``values`` packed one after another) in
    one call (Linux 5.6 and later); how many the kernel took.  A kernel without batches:
    one call per entry."""
    k, v = ctypes.create_string_buffer(keys, len(keys)), ctypes.create_string_buffer(values, len(values))
    attr = ctypes.create_string_buffer(struct.pack("=QQQQIIQQ", 0, 0, ctypes.addressof(k), ctypes.addressof(v),
                                                   count, fd, 0, 0).ljust(ATTR_BYTES, b"\0"), ATTR_BYTES)
    try:
        _bpf_buffer(MAP_UPDATE_BATCH, attr, f"adding {count} map entries")
    except BpfError as e:
        done = struct.unpack_from("=I", attr.raw, 32)[0]
        if e.errno in (errnos.EINVAL, errnos.ENOTSUP, 524) and not done:  # 524: ENOTSUPP, the kernel's own
            key_bytes, value_bytes = len(keys) // count, len(values) // count
            for i in range(count):
                map_update(fd, keys[i * key_bytes:(i + 1) * key_bytes], values[i * value_bytes:(i + 1) * value_bytes])
            return count
        raise BpfError(e.errno, f"adding map entry {done + 1} of {count}", done=done) from None
    return count


def prog_load(code: bytes, name: str) -> int:
    """A sched_cls program loaded (verified); its file descriptor.  A refusal carries the
    verifier's log."""
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(LOG_BYTES)
    attr = struct.pack("=IIQQIIQII16s", PROG_TYPE_SCHED_CLS, len(code) // 8, ctypes.addressof(insns),
                       ctypes.addressof(license_), 1, LOG_BYTES, ctypes.addressof(log), 0, 0, _name(name))
    try:
        return _bpf(PROG_LOAD, attr, "loading the queue program")
    except BpfError as e:
        raise BpfError(e.errno, "loading the queue program", log.value.decode(errors="replace")) from None


def prog_fd(prog_id: int) -> int:
    return _bpf(PROG_GET_FD_BY_ID, struct.pack("=I", prog_id), f"opening program {prog_id}")


def map_of_program(prog_id: int) -> int:
    """A file descriptor of the (first) map program ``prog_id`` uses."""
    fd = prog_fd(prog_id)
    try:
        ids = (ctypes.c_uint32 * 4)()
        info = ctypes.create_string_buffer(PROG_INFO.pack(0, 0, b"", 0, 0, 0, 0, 0, 0, 4, ctypes.addressof(ids)))
        _bpf(OBJ_GET_INFO_BY_FD, struct.pack("=IIQ", fd, PROG_INFO.size, ctypes.addressof(info)),
             f"reading program {prog_id}")
        count = PROG_INFO.unpack(info.raw[:PROG_INFO.size])[9]
    finally:
        os.close(fd)
    if not count:
        raise BpfError(errnos.ENOENT, f"program {prog_id} has no map")
    return _bpf(MAP_GET_FD_BY_ID, struct.pack("=I", ids[0]), f"opening map {ids[0]}")
