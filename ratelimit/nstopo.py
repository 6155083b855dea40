"""A client-router-server lab on one machine, in network namespaces.

Layout of the lab called NAME with N clients (everything is named from the
prefix ``rl-NAME-``, so ``destroy(NAME)`` finds it again even after a crash)::

    rl-NAME-c1 .. rl-NAME-cN         rl-NAME-router                 rl-NAME-server
    eth0 198.18.0.(i+1)/24 ---- veth ---- cI -+
                                              lan0 (bridge)  wan0 ---- veth ---- eth0
                                          198.18.0.1/24   198.19.0.1/24         198.19.0.2/24

- Every client has its own veth link; the router ends (``c1``..``cN``) are
  ports of one bridge, ``lan0``, which holds the router's client-side address.
  So the router has ONE client-facing interface (``lan0``) and ONE
  server-facing interface (``wan0``), as on the original ratelimit routers:
  shape or police ``lan0`` egress for server-to-client traffic and ``wan0``
  egress for client-to-server traffic, telling clients apart by address/port.
- Clients share one /24 and differ in the last octet (the u32 hash key of the
  original design): client i is 198.18.0.(i+1), so at most 253 clients.
- IPv6 likewise: clients 2001:db8:18::(i+1 in hex)/64, router 2001:db8:18::1 and
  2001:db8:19::1, server 2001:db8:19::2/64 (addresses added with ``nodad``).
- The router forwards (net.ipv4.ip_forward=1, net.ipv6.conf.all.forwarding=1);
  clients and the server route everything (``default``) via the router.
- Addresses are from 198.18.0.0/15 (RFC 2544 benchmark range) and 2001:db8::/32
  (documentation range): never a range a real LAN uses.
- Unless ``offload=True``, every lab link has ``gso_max_segs 1``: TCP then hands
  the router MTU-sized packets, as a real wire would, instead of 64 kB
  super-packets that a per-packet policer or netem would treat as one.

Built with a handful of ``ip -batch`` processes (one per namespace), so a
64-client lab takes well under a second on a host.  Needs root.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ratelimit.errors import (ApplyError, ConflictError, FieldError, NotFoundError,
                              PermissionDenied)

PREFIX = "rl-"
IFNAMSIZ = 16  # including the terminating NUL: names of at most 15 characters
MAX_CLIENTS = 253
NETNS_DIR = "/run/netns"

LAN_IF = "lan0"  # router, client-facing bridge
WAN_IF = "wan0"  # router, server-facing
HOST_IF = "eth0"  # the one interface of a client or the server
LAN4, WAN4 = "198.18.0", "198.19.0"
LAN6, WAN6 = "2001:db8:18::", "2001:db8:19::"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,31}$")
_ROLE_RE = re.compile(r"^(router|server|c[1-9][0-9]*)$")


class TopologyError(ApplyError):
    """Building, using or removing a lab topology failed."""


def check_ifname(name: str) -> str:
    """Return ``name`` if the kernel accepts it as an interface name (1-15
    characters, no '/', ':' or whitespace), else raise ``FieldError``."""
    if not 0 < len(name) < IFNAMSIZ:
        raise FieldError("interface name", name, f"is not 1-{IFNAMSIZ - 1} characters long")
    if name in (".", "..") or re.search(r"[/:\s]", name):
        raise FieldError("interface name", name, "may not contain '/', ':' or whitespace")
    return name


def check_name(name: str) -> str:
    """A lab name: lower-case letters, digits and '_' (no '-', so that one lab's
    prefix is never the prefix of another's), at most 32 characters."""
    if not _NAME_RE.match(name):
        raise FieldError("lab name", name, "is not 1-32 of a-z, 0-9, '_' starting with a letter or digit")
    return name


def lab_prefix(name: str) -> str:
    """``rl-NAME-``: the prefix of every namespace of lab NAME."""
    return f"{PREFIX}{check_name(name)}-"


def _ip() -> str:
    path = shutil.which("ip")
    if path is None:
        raise NotFoundError("the 'ip' command is missing: apt-get install iproute2")
    return path


def _run(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), input=stdin, text=True, capture_output=True, check=False)


def _batch(netns: str | None, lines: Sequence[str], *, force: bool = False) -> None:
    """Run ``lines`` through one ``ip [-n NETNS] -batch -`` process."""
    if not lines:
        return
    argv = [_ip()]
    if netns:
        argv += ["-n", netns]
    if force:
        argv.append("-force")
    argv += ["-batch", "-"]
    r = _run(argv, "\n".join(lines) + "\n")
    if r.returncode != 0 and not force:
        where = f" in {netns}" if netns else ""
        if os.geteuid() != 0:
            raise PermissionDenied(f"building a namespace lab needs root ({r.stderr.strip()})")
        raise TopologyError(f"ip{where} failed: {' '.join(r.stderr.split())}")


_CLONE_NEWNET = 0x40000000


def in_netns(netns: str, fn, *args):
    """Call ``fn(*args)`` in network namespace ``netns`` and return its result.

    It runs in a short-lived thread that joins the namespace (``setns`` acts on
    the calling thread only), so this process stays where it is and no process
    is started: cheap, which matters in the VM where starting one costs ~0.3 s.
    Sockets made there keep that namespace for their life and can be used
    from any thread; ``/proc/sys/net`` opened there shows that namespace's
    settings.
    """
    out: dict = {}

    def run() -> None:
        try:
            fd = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            out["result"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e

    t = threading.Thread(target=run, name=f"netns-{netns}")
    t.start()
    t.join()
    if "error" in out:
        e = out["error"]
        if isinstance(e, FileNotFoundError) and not os.path.exists(os.path.join(NETNS_DIR, netns)):
            raise NotFoundError(f"network namespace {netns!r} does not exist") from e
        if isinstance(e, PermissionError):
            raise PermissionDenied(f"entering network namespace {netns!r} needs root") from e
        raise e
    return out["result"]


def netns_socket(netns: str, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM,
                 proto: int = 0) -> socket.socket:
    """A socket that lives in network namespace ``netns`` (see ``in_netns``):
    a test can run a server and its clients in different namespaces without
    starting a process."""
    return in_netns(netns, socket.socket, family, type, proto)


def set_sysctl(netns: str, key: str, value: str | int) -> None:
    """Write sysctl ``key`` (``net.ipv4.ip_forward``) inside ``netns``."""
    path = "/proc/sys/" + key.replace(".", "/")

    def write() -> None:
        with open(path, "w") as f:
            f.write(f"{value}\n")
    in_netns(netns, write)


def namespaces() -> list[str]:
    """Names of all named network namespaces (those in /run/netns)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def list_leftovers(prefix: str = PREFIX) -> list[str]:
    """Named namespaces whose names start with ``prefix`` (default: every lab's)."""
    return [n for n in namespaces() if n.startswith(prefix)]


def lab_namespaces(name: str) -> list[str]:
    """The namespaces that belong to lab ``name`` (exactly its roles, no others)."""
    prefix = lab_prefix(name)
    return [n for n in list_leftovers(prefix) if _ROLE_RE.match(n[len(prefix):])]


def _pids_in(netns_names: Sequence[str]) -> list[int]:
    """Processes whose network namespace is one of ``netns_names`` (one pass
    over /proc, like ``ip netns pids``, without starting a process)."""
    wanted = set()
    for name in netns_names:
        try:
            st = os.stat(os.path.join(NETNS_DIR, name))
        except FileNotFoundError:
            continue
        wanted.add((st.st_dev, st.st_ino))
    if not wanted:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (ns.st_dev, ns.st_ino) in wanted:
            pids.append(int(entry))
    return pids


def netns_pids(netns: str) -> list[int]:
    """Processes whose network namespace is ``netns``."""
    return _pids_in([netns])


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a child we have not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_netns_processes(netns_names: Sequence[str], grace_s: float = 2.0) -> None:
    """SIGTERM, then after ``grace_s`` SIGKILL, every process in the namespaces."""
    pids = [p for p in _pids_in(netns_names) if p != os.getpid()]
    if not pids:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.02)


def delete_namespaces(netns_names: Sequence[str], *, kill: bool = True) -> None:
    """Delete the named namespaces (their veths go with them), killing the
    processes inside first unless ``kill=False``.  Missing names are ignored."""
    names = [n for n in netns_names if n in set(namespaces())]
    if not names:
        return
    if kill:
        kill_netns_processes(names)
    _batch(None, [f"netns delete {n}" for n in names], force=True)
    left = [n for n in names if n in set(namespaces())]
    if left:
        raise TopologyError(f"could not delete namespaces {', '.join(left)}")


def destroy(name: str, *, kill: bool = True) -> list[str]:
    """Remove every namespace of lab ``name`` (leftovers of a crash included).
    Returns the namespaces removed; removing nothing is not an error."""
    found = lab_namespaces(name)
    delete_namespaces(found, kill=kill)
    return found


@dataclass(frozen=True)
class Topology:
    """A lab that exists: its namespace names and addresses.  Build with
    ``Topology.create``; reopen an existing one with ``Topology.open``."""

    name: str
    clients: tuple[str, ...]  # client namespaces, rl-NAME-c1 ...
    router: str
    server: str
    client_addrs: tuple[str, ...]
    client_addrs6: tuple[str, ...]
    router_client_addr: str = f"{LAN4}.1"
    router_server_addr: str = f"{WAN4}.1"
    server_addr: str = f"{WAN4}.2"
    router_client_addr6: str = f"{LAN6}1"
    router_server_addr6: str = f"{WAN6}1"
    server_addr6: str = f"{WAN6}2"
    router_client_if: str = LAN_IF  # the bridge toward the clients
    router_server_if: str = WAN_IF
    client_if: str = HOST_IF
    server_if: str = HOST_IF
    prefixlen: int = 24
    prefixlen6: int = 64

    # -- construction -----------------------------------------------------
    @classmethod
    def layout(cls, name: str, clients: int = 1) -> Topology:
        """The topology ``create`` would build (pure: nothing is touched)."""
        prefix = lab_prefix(name)
        if isinstance(clients, bool) or not isinstance(clients, int) or not 1 <= clients <= MAX_CLIENTS:
            raise FieldError("clients", clients, f"is not a number of clients (1-{MAX_CLIENTS})")
        for i in (1, clients):
            check_ifname(f"c{i}")
        idx = range(1, clients + 1)
        return cls(name=name,
                   clients=tuple(f"{prefix}c{i}" for i in idx),
                   router=f"{prefix}router", server=f"{prefix}server",
                   client_addrs=tuple(f"{LAN4}.{i + 1}" for i in idx),
                   client_addrs6=tuple(f"{LAN6}{i + 1:x}" for i in idx))

    @classmethod
    def create(cls, name: str, clients: int = 1, *, replace: bool = False,
               offload: bool = False) -> Topology:
        """Build the lab.  If any of its namespaces exist already, raise
        ``ConflictError`` (or remove them first with ``replace=True``).  On any
        failure everything built so far is removed again."""
        topo = cls.layout(name, clients)
        existing = lab_namespaces(name)
        if existing:
            if not replace:
                raise ConflictError(f"lab {name!r} exists already ({', '.join(existing[:3])}"
                                    f"{', ...' if len(existing) > 3 else ''}); remove it with "
                                    f"nstopo.destroy({name!r}) or pass replace=True")
            destroy(name)
        try:
            topo._build(offload)
        except BaseException:
            delete_namespaces(topo.namespaces, kill=True)
            raise
        return topo

    @classmethod
    def open(cls, name: str) -> Topology:
        """The existing lab ``name`` (clients counted from its namespaces)."""
        found = set(lab_namespaces(name))
        prefix = lab_prefix(name)
        n = 0
        while f"{prefix}c{n + 1}" in found:
            n += 1
        if n == 0 or f"{prefix}router" not in found or f"{prefix}server" not in found:
            raise NotFoundError(f"no complete lab {name!r} (namespaces found: "
                                f"{', '.join(sorted(found)) or 'none'})")
        return cls.layout(name, n)

    def _build(self, offload: bool) -> None:
        gso = "" if offload else " gso_max_segs 1"
        r, s = self.router, self.server
        for ns in self.namespaces:  # one process each: `ip -batch` mangles `netns add` now and then
            made = _run([_ip(), "netns", "add", ns])
            if made.returncode != 0:
                if os.geteuid() != 0:
                    raise PermissionDenied(f"building a namespace lab needs root ({made.stderr.strip()})")
                raise TopologyError(f"ip netns add {ns} failed: {' '.join(made.stderr.split())}")
        lines = [
            "link set lo up",
            f"link add {LAN_IF}{gso} type bridge",
            f"link add {WAN_IF}{gso} type veth peer name {HOST_IF} netns {s}{gso}",
        ]
        for i, ns in enumerate(self.clients, 1):
            lines += [f"link add c{i}{gso} type veth peer name {HOST_IF} netns {ns}{gso}",
                      f"link set c{i} master {LAN_IF}",
                      f"link set c{i} up"]
        lines += [
            f"addr add {self.router_client_addr}/{self.prefixlen} dev {LAN_IF}",
            f"addr add {self.router_client_addr6}/{self.prefixlen6} dev {LAN_IF} nodad",
            f"addr add {self.router_server_addr}/{self.prefixlen} dev {WAN_IF}",
            f"addr add {self.router_server_addr6}/{self.prefixlen6} dev {WAN_IF} nodad",
            f"link set {LAN_IF} up",
            f"link set {WAN_IF} up",
        ]
        _batch(r, lines)
        _batch(s, self._host_lines(self.server_addr, self.server_addr6,
                                   self.router_server_addr, self.router_server_addr6))
        for ns, a4, a6 in zip(self.clients, self.client_addrs, self.client_addrs6):
            _batch(ns, self._host_lines(a4, a6, self.router_client_addr, self.router_client_addr6))
        set_sysctl(r, "net.ipv4.ip_forward", 1)
        set_sysctl(r, "net.ipv6.conf.all.forwarding", 1)

    def _host_lines(self, addr4: str, addr6: str, gw4: str, gw6: str) -> list[str]:
        return ["link set lo up",
                f"addr add {addr4}/{self.prefixlen} dev {HOST_IF}",
                f"addr add {addr6}/{self.prefixlen6} dev {HOST_IF} nodad",
                f"link set {HOST_IF} up",
                f"route add default via {gw4}",
                f"route add ::/0 via {gw6}"]

    # -- use --------------------------------------------------------------
    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.router, self.server, *self.clients)

    @property
    def prefix(self) -> str:
        return lab_prefix(self.name)

    def ns(self, host: str | int) -> str:
        """The namespace of ``host``: 'router', 'server', 'client' (= client 1),
        'client3' / 'c3' / 3 (client 3), or a namespace name of this lab."""
        if isinstance(host, int) and not isinstance(host, bool):
            i = host
        elif host in self.namespaces:
            return host
        elif host in ("router", "server"):
            return self.router if host == "router" else self.server
        elif host == "client":
            i = 1
        else:
            m = re.fullmatch(r"(?:client|c)([0-9]+)", str(host))
            if not m:
                raise FieldError("host", host, "is not router, server, clientN or a namespace of "
                                 f"lab {self.name!r}")
            i = int(m.group(1))
        if not 1 <= i <= len(self.clients):
            raise FieldError("host", host, f"is not a client of lab {self.name!r} (1-{len(self.clients)})")
        return self.clients[i - 1]

    def addr(self, host: str | int, *, v6: bool = False) -> str:
        """The address of ``host`` (the router's is its client-facing one)."""
        ns = self.ns(host)
        if ns == self.router:
            return self.router_client_addr6 if v6 else self.router_client_addr
        if ns == self.server:
            return self.server_addr6 if v6 else self.server_addr
        i = self.clients.index(ns)
        return (self.client_addrs6 if v6 else self.client_addrs)[i]

    def argv(self, host: str | int, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run in ``host``'s namespace (``ip netns exec``)."""
        return [_ip(), "netns", "exec", self.ns(host), *argv]

    def exec(self, host: str | int, argv: Sequence[str], *, check: bool = True,
             timeout: float | None = 60, input: str | None = None,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``host``'s namespace and wait; output is captured as
        text.  ``check=True`` raises ``TopologyError`` (with stderr) on failure."""
        full_env = None if env is None else {**os.environ, **env}
        try:
            r = subprocess.run(self.argv(host, argv), input=input, text=True, capture_output=True,
                               timeout=timeout, env=full_env, check=False)
        except subprocess.TimeoutExpired as e:
            raise TopologyError(f"{' '.join(argv)} in {self.ns(host)} did not finish "
                                f"within {timeout:g} s") from e
        if check and r.returncode != 0:
            raise TopologyError(f"{' '.join(argv)} in {self.ns(host)} exited {r.returncode}: "
                                f"{' '.join(r.stderr.split())[-500:]}")
        return r

    def popen(self, host: str | int, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start ``argv`` in ``host``'s namespace without waiting (servers, load
        generators).  ``destroy`` kills whatever still runs in the lab."""
        return subprocess.Popen(self.argv(host, argv), **kw)

    def socket(self, host: str | int, family: int = socket.AF_INET,
               type: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket in ``host``'s namespace (see ``netns_socket``)."""
        return netns_socket(self.ns(host), family, type)

    def tc(self, *args: str, host: str | int = "router", check: bool = True) -> subprocess.CompletedProcess:
        """``tc -n NS ARGS`` (on the router unless ``host`` says otherwise)."""
        return self._tool("tc", host, args, check)

    def ip(self, *args: str, host: str | int = "router", check: bool = True) -> subprocess.CompletedProcess:
        """``ip -n NS ARGS`` (on the router unless ``host`` says otherwise)."""
        return self._tool("ip", host, args, check)

    def _tool(self, tool: str, host, args, check) -> subprocess.CompletedProcess:
        path = shutil.which(tool)
        if path is None:
            raise NotFoundError(f"the {tool!r} command is missing: apt-get install iproute2")
        ns = self.ns(host)
        r = _run([path, "-n", ns, *args])
        if check and r.returncode != 0:
            raise TopologyError(f"{tool} -n {ns} {' '.join(args)} exited {r.returncode}: "
                                f"{' '.join(r.stderr.split())[-500:]}")
        return r

    def destroy(self) -> list[str]:
        """Remove this lab (killing processes still running in it)."""
        return destroy(self.name)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()
