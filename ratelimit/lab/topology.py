"""A client-router-server lab on one machine, in network namespaces (the layout and why:
docs/lab.md, "The namespace lab").

- Everything of the lab NAME is named from ``rl-NAME-``, so ``destroy(NAME)`` finds it again
  even after a crash.
- The router has one client-facing interface, the bridge ``lan0`` (each client's veth is a
  port of it), and one server-facing interface, ``wan0``: ratelimit works on ``lan0`` alone.
- Client i is 198.18.0.(i+1) and 2001:db8:18::(i+1 in hex), the server 198.19.0.2 and
  2001:db8:19::2; the router forwards between them.
- Every device has ``QUEUES`` tx queues, and ``gso_max_segs 1`` unless ``offload=True``: TCP
  hands the router packets of one MTU, as a real wire would.
- Built through pyroute2 (no ``ip`` processes); commands run inside with ``ip netns exec``,
  which shows ``/etc/netns/NS/hosts`` as ``/etc/hosts``.  Needs root.

>>> lab_prefix("demo")
'rl-demo-'
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ..errors import ApplyError, ConflictError, FieldError, NotFoundError, PermissionDenied
from ..kernel import netns as ns_
from ..plan.layout import MAX_QUEUES

PREFIX = "rl-"
IFNAMSIZ = 16  # including the terminating NUL: names of at most 15 characters
MAX_CLIENTS = 253

LAN_IF = "lan0"  # router, client-facing bridge
WAN_IF = "wan0"  # router, server-facing
HOST_IF = "eth0"  # the one interface of a client or the server
LAN4, WAN4 = "198.18.0", "198.19.0"
LAN6, WAN6 = "2001:db8:18::", "2001:db8:19::"
IFA_F_NODAD = 0x02

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,31}$")
_ROLE_RE = re.compile(r"^(router|server|c[1-9][0-9]*)$")

Step = tuple[str, Callable[[IPRoute], object]]  # (what it does, as ip would say it; the call)


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


def configure(netns: str, steps: Sequence[Step]) -> None:
    """Carry out ``steps`` in ``netns`` through one pyroute2 socket; the first the
    kernel refuses raises TopologyError naming it."""
    ns_.off_loop(_configure, netns, steps)


def _configure(netns: str, steps: Sequence[Step]) -> None:
    with IPRoute(netns=netns, flags=0) as ipr:
        for what, call in steps:
            try:
                call(ipr)
            except NetlinkError as e:
                if e.code == errno.EPERM and os.geteuid() != 0:
                    raise PermissionDenied(f"building a namespace lab needs root ({what})") from None
                raise TopologyError(f"{what} in {netns} failed: {os.strerror(e.code)}") from None


def _index(ipr: IPRoute, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise NetlinkError(errno.ENODEV, f"no device {name}")
    return found[0]


def _up(name: str) -> Step:
    return f"link set {name} up", lambda ipr: ipr.link("set", index=_index(ipr, name), state="up")


def _addr(dev: str, address: str, prefixlen: int) -> Step:
    v6 = ":" in address
    return (f"addr add {address}/{prefixlen} dev {dev}" + (" nodad" if v6 else ""),
            lambda ipr: ipr.addr("add", index=_index(ipr, dev), address=address, prefixlen=prefixlen,
                                 **({"flags": IFA_F_NODAD} if v6 else {})))


def _route(gateway: str) -> Step:
    v6 = ":" in gateway
    dst = "::/0" if v6 else "0.0.0.0/0"
    return (f"route add {dst} via {gateway}",
            lambda ipr: ipr.route("add", dst=dst, gateway=gateway, family=socket.AF_INET6 if v6 else socket.AF_INET))


# Every lab link's transmit (and receive) queues: eight per CPU.  `--queues auto` makes a tree
# per queue, so shaping uses every CPU and each tree walks few groups; why eight, measured:
# docs/design.md, "Why queues".
QUEUES_PER_CPU = 8
QUEUES = min(QUEUES_PER_CPU * (os.cpu_count() or 1), MAX_QUEUES)


def _queues() -> dict:
    """QUEUES transmit and receive queues, so that ratelimit can shape on every CPU with few
    groups per tree (``--queues auto``)."""
    return {"num_tx_queues": QUEUES, "num_rx_queues": QUEUES}


def _link(name: str, kind: str, gso: dict, **attrs) -> Step:
    q = _queues()
    return (f"link add {name} numtxqueues {q['num_tx_queues']} type {kind}",
            lambda ipr: ipr.link("add", ifname=name, kind=kind, **gso, **q, **attrs))


def _veth(name: str, peer_netns: str, gso: dict) -> Step:
    q = _queues()
    return (f"link add {name} numtxqueues {q['num_tx_queues']} type veth peer name {HOST_IF} netns {peer_netns}",
            lambda ipr: ipr.link("add", ifname=name, kind="veth", **gso, **q,
                                 peer={"ifname": HOST_IF, "net_ns_fd": peer_netns, **gso, **q}))


def _master(name: str, bridge: str) -> Step:
    return (f"link set {name} master {bridge}",
            lambda ipr: ipr.link("set", index=_index(ipr, name), master=_index(ipr, bridge)))


def require_tools() -> None:
    """``NotFoundError`` naming iproute2 unless ``ip`` and ``tc`` are installed (the lab's
    hosts run their scripts through ``ip netns exec``, and the probe uses ``tc``)."""
    for tool in ("ip", "tc"):
        _tool_path(tool)


def _tool_path(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise NotFoundError(f"the {tool!r} command is missing: apt-get install iproute2")
    return path


def list_leftovers(prefix: str = PREFIX) -> list[str]:
    """Named namespaces whose names start with ``prefix`` (default: every lab's)."""
    return [n for n in ns_.namespaces() if n.startswith(prefix)]


def lab_namespaces(name: str) -> list[str]:
    """The namespaces that belong to lab ``name`` (exactly its roles, no others)."""
    prefix = lab_prefix(name)
    return [n for n in list_leftovers(prefix) if _ROLE_RE.match(n[len(prefix):])]


def destroy(name: str, *, kill: bool = True) -> list[str]:
    """Remove every namespace of lab ``name`` (leftovers of a crash included).
    Returns the namespaces removed; removing nothing is not an error."""
    found = lab_namespaces(name)
    left = ns_.delete_namespaces(found, kill=kill)
    if left:
        raise TopologyError(f"could not delete namespaces {', '.join(left)}")
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
                                    f"topology.destroy({name!r}) or pass replace=True")
            destroy(name)
        try:
            topo._build(offload)
        except BaseException:
            ns_.delete_namespaces(topo.namespaces, kill=True)
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
        gso = {} if offload else {"gso_max_segs": 1}
        for ns in self.namespaces:
            ns_.create(ns)
        steps = [_up("lo"), _link(LAN_IF, "bridge", gso), _veth(WAN_IF, self.server, gso)]
        for i, ns in enumerate(self.clients, 1):
            steps += [_veth(f"c{i}", ns, gso), _master(f"c{i}", LAN_IF), _up(f"c{i}")]
        steps += [_addr(LAN_IF, self.router_client_addr, self.prefixlen),
                  _addr(LAN_IF, self.router_client_addr6, self.prefixlen6),
                  _addr(WAN_IF, self.router_server_addr, self.prefixlen),
                  _addr(WAN_IF, self.router_server_addr6, self.prefixlen6),
                  _up(LAN_IF), _up(WAN_IF)]
        configure(self.router, steps)
        configure(self.server, self._host_steps(self.server_addr, self.server_addr6,
                                                self.router_server_addr, self.router_server_addr6))
        for ns, a4, a6 in zip(self.clients, self.client_addrs, self.client_addrs6):
            configure(ns, self._host_steps(a4, a6, self.router_client_addr, self.router_client_addr6))
        ns_.set_sysctl(self.router, "net.ipv4.ip_forward", 1)
        ns_.set_sysctl(self.router, "net.ipv6.conf.all.forwarding", 1)

    def _host_steps(self, addr4: str, addr6: str, gw4: str, gw6: str) -> list[Step]:
        return [_up("lo"), _addr(HOST_IF, addr4, self.prefixlen), _addr(HOST_IF, addr6, self.prefixlen6),
                _up(HOST_IF), _route(gw4), _route(gw6)]

    # -- use --------------------------------------------------------------
    @property
    def client_hosts(self) -> tuple[str, ...]:
        """Every client address, IPv4 and IPv6: what a lab's router limits."""
        return self.client_addrs + self.client_addrs6

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
        return [_tool_path("ip"), "netns", "exec", self.ns(host), *argv]

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
        return ns_.netns_socket(self.ns(host), family, type)

    def tc(self, *args: str, host: str | int = "router", check: bool = True) -> subprocess.CompletedProcess:
        """``tc -n NS ARGS`` (on the router unless ``host`` says otherwise)."""
        return self._tool("tc", host, args, check)

    def ip(self, *args: str, host: str | int = "router", check: bool = True) -> subprocess.CompletedProcess:
        """``ip -n NS ARGS`` (on the router unless ``host`` says otherwise)."""
        return self._tool("ip", host, args, check)

    def _tool(self, tool: str, host, args, check) -> subprocess.CompletedProcess:
        ns = self.ns(host)
        r = subprocess.run([_tool_path(tool), "-n", ns, *args], text=True, capture_output=True, check=False)
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
