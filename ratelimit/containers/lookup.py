"""Docker and Podman containers as the targets and hosts of links (``--container``,
``--hosts container:NAME``).

Two halves.  The pure half checks a name against the engines' own rule before
anything runs, reads ``docker inspect`` / ``podman container inspect`` JSON into a
``Container``, and says in one line why a container cannot carry links (not
running, no network, host or user-mode networking, rootless Podman) or which of
its networks is meant.  The other half runs the engine
(argv, never a shell), follows a container that uses another's namespace to the
one that owns it (a Podman pod's infra container, compose's
``network_mode: service:``), and finds its interface on a network and that
interface's host-side veth through netlink (``kernel.peers``): the container's device whose MAC
address the engine reports, its ``IFLA_LINK`` (the peer's index) and
``IFLA_LINK_NETNSID``, checked from the host's side (the peer is a veth whose own
link is the container's device, in the container's namespace).  No device is
guessed from its name.

The container's namespace is ``/proc/PID/ns/net``; ``netns_name`` is the name a run
gives it in /run/netns (``rl-ct-`` and 12 hex digits of the owning container's id), so
two containers of one pod lead to one record.  The server use sets the container's own
device to single segments (``single_segments``).  A run's turn, the names it gives and
what it leaves are ``attach``'s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from ipaddress import ip_address

from ..errors import FieldError, NotFoundError, UsageError
from ..kernel import peers

ENGINES = ("docker", "podman")
# Docker's and Podman's rule for a container name (both: [a-zA-Z0-9][a-zA-Z0-9_.-]*);
# an id or a unique prefix of one is hex, which the rule takes too
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
NAME_ALLOWED = "is not a container name or id (a letter or digit, then letters, digits, '_', '.' or '-'; 128 at most)"
HOST_PREFIX = "container:"  # in --hosts: container:NAME
NETNS_PREFIX = "rl-ct-"  # the names ``attach.attached`` gives container namespaces
ENGINE_TIMEOUT_S = 30
DOCKERD_HINT = ("start it (systemctl start docker; where no init system runs, dockerd: docs/lab.md, "
                "Container engines without an init system), or set DOCKER_HOST to its socket")


class ContainerError(NotFoundError):
    """A container that cannot carry links, or an engine that cannot be asked (exit 3)."""


@dataclass(frozen=True)
class Endpoint:
    """A container's place on one network, as the engine reports it."""

    network: str
    ipv4: str | None
    ipv6: str | None
    mac: str | None

    def addresses(self) -> tuple:
        return tuple(ip_address(a) for a in (self.ipv4, self.ipv6) if a)


@dataclass(frozen=True)
class Container:
    """What ``inspect`` says about one container."""

    engine: str
    id: str
    name: str
    status: str  # running, exited, created, paused, ...
    pid: int
    network_mode: str  # a network's name, bridge, default, host, none, slirp4netns, container:ID, ...
    networks: tuple[Endpoint, ...] = field(default=())
    rootless: bool = False  # podman's own report of how it runs

    @property
    def short_id(self) -> str:
        return self.id[:12]

    def label(self) -> str:
        return f"{self.engine} container '{self.name}'"

    def namespace_owner(self) -> str | None:
        """The id or name of the container whose network namespace this one uses, if any."""
        mode = self.network_mode
        return mode.split(":", 1)[1] if mode.startswith("container:") else None

    def endpoint(self, network: str) -> Endpoint | None:
        return next((e for e in self.networks if e.network == network), None)


def check_name(name, field_name: str = "--container") -> str:
    """``name`` if the engines could have given it to a container, else FieldError.  Runs
    before any engine is asked, so no shell word, option or path ever reaches one."""
    if not isinstance(name, str) or not NAME_RULE.match(name):
        raise FieldError(field_name, f"'{name}'", NAME_ALLOWED)
    return name


def check_engine(engine: str | None) -> str | None:
    if engine is not None and engine not in ENGINES:
        raise FieldError("--engine", f"'{engine}'", f"is not a container engine ({', '.join(ENGINES)})")
    return engine


def parse_inspect(engine: str, text: str, name: str, rootless: bool = False) -> Container:
    """The first container of ``inspect``'s JSON (a list of one object)."""
    try:
        data = json.loads(text)
        item = data[0] if isinstance(data, list) else data
        state = item["State"]
        settings = item.get("NetworkSettings") or {}
        nets = settings.get("Networks") or {}
        endpoints = tuple(
            Endpoint(net, n.get("IPAddress") or None, n.get("GlobalIPv6Address") or None, n.get("MacAddress") or None)
            for net, n in sorted(nets.items()))
        return Container(engine, item["Id"], str(item.get("Name", name)).lstrip("/"),
                         str(state.get("Status", "")).lower(), int(state.get("Pid") or 0),
                         str((item.get("HostConfig") or {}).get("NetworkMode") or ""), endpoints, rootless)
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise ContainerError(f"--container: {engine} inspect '{name}' did not answer as expected "
                             f"({type(err).__name__}: {err})") from None


def refusal(c: Container) -> str | None:
    """Why ``c`` cannot carry links (one line naming it), or None.  A container that uses
    another's namespace is not refused: ``resolve`` follows it to the owner."""
    if c.status != "running" or c.pid <= 0:
        return f"{c.label()} is not running ({c.status or 'no state'}; start it first)"
    mode = c.network_mode
    if mode == "host":
        return (f"{c.label()} uses host networking: it has no interface of its own "
                f"(use --interface on the host's device instead)")
    if mode == "none":
        return f"{c.label()} has no network (--network none)"
    if c.rootless:
        return (f"{c.label()} belongs to rootless Podman, whose containers have no host-side veth and "
                f"whose namespaces only their user may enter; run ratelimit and the container as root "
                f"(docs/containers.md, Rootless Podman)")
    if mode.startswith(("slirp4netns", "pasta")):
        return (f"{c.label()} uses user-mode networking ({mode}): it has no host-side veth; run it on a "
                f"bridge network, or shape inside it with --netns after binding /proc/PID/ns/net "
                f"(docs/containers.md, Rootless Podman)")
    if mode.startswith("ns:"):
        return f"{c.label()} uses a namespace its engine did not make ({mode})"
    if c.namespace_owner() is None and not c.networks:
        return f"{c.label()} is on no network"
    return None


def choose_network(c: Container, network: str | None, field_name: str = "--container") -> Endpoint:
    """The endpoint links go on: the one network ``c`` is on, or the one named."""
    names = [e.network for e in c.networks]
    if network is not None:
        found = c.endpoint(network)
        if found is None:
            raise ContainerError(f"--network: {c.label()} is not on network '{network}' "
                                 f"(it is on: {', '.join(names) or 'none'})")
        return found
    if len(c.networks) != 1:
        raise ContainerError(f"{field_name}: {c.label()} is on {len(names)} networks ({', '.join(names)}); "
                             f"name one with --network")
    return c.networks[0]


def shared_network(a: Container, b: Container, network: str | None, field_name: str = "--hosts") -> str:
    """The network ``a`` and ``b`` are both on: the one named, or the only one they share."""
    shared = [e.network for e in a.networks if b.endpoint(e.network) is not None]
    if network is not None:
        if network not in shared:
            raise ContainerError(f"{field_name}: {b.label()} and {a.label()} do not share network '{network}' "
                                 f"(they share: {', '.join(shared) or 'none'})")
        return network
    if len(shared) != 1:
        listed = ", ".join(shared)
        raise ContainerError(f"{field_name}: {b.label()} and {a.label()} share "
                             + (f"{len(shared)} networks ({listed}); name one with --network" if shared
                                else "no network"))
    return shared[0]


def host_items(text) -> list[str]:
    """The comma-separated items of a --hosts value."""
    items = text if isinstance(text, (list, tuple)) else str(text or "").split(",")
    return [str(h).strip() for h in items if str(h).strip()]


def netns_name(c: Container) -> str:
    """The name ``attach.attached`` gives the namespace ``c`` owns (``c`` must own it)."""
    return f"{NETNS_PREFIX}{c.short_id}"


# ---------------------------------------------------------------- the engine


@dataclass(frozen=True)
class Engine:
    """One engine's command line: ``run`` returns (exit status, stdout, stderr)."""

    name: str
    path: str

    def run(self, *args: str) -> tuple[int, str, str]:
        try:
            r = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ContainerError(f"--container: {self.name} did not answer in {ENGINE_TIMEOUT_S} s") from None
        return r.returncode, r.stdout, r.stderr

    def inspect(self, name: str) -> Container | None:
        """The container ``name`` (a name, id or id prefix), or None when this engine has none."""
        check_name(name)
        args = ("container", "inspect", "--", name)
        code, out, err = self.run(*args)
        if code != 0:
            text = " ".join(err.split())
            if re.search(r"no such (container|object)|no container with name or id", text, re.I):
                return None
            if self.name == "docker" and re.search(r"cannot connect to the docker daemon|is the docker daemon running",
                                                   text, re.I):
                raise ContainerError(f"--container: docker is installed but its daemon does not answer ({text}); "
                                     f"{DOCKERD_HINT}")
            raise ContainerError(f"--container: {self.name} container inspect '{name}' failed: {text or f'exit {code}'}")
        return parse_inspect(self.name, out, name, self.rootless())

    def rootless(self) -> bool:
        return self.name == "podman" and os.geteuid() != 0


def engines(engine: str | None = None, which=shutil.which) -> list[Engine]:
    """The engines to ask: the one named, or every one installed; ContainerError if none is."""
    check_engine(engine)
    wanted = (engine,) if engine else ENGINES
    found = [Engine(e, p) for e in wanted if (p := which(e))]
    if not found:
        raise ContainerError(f"--container: {engine or 'no container engine (docker or podman)'} "
                             f"{'is not' if engine else 'is'} installed"
                             + (f" (apt-get install {'docker.io' if engine == 'docker' else engine})" if engine else ""))
    return found


def find(name: str, engine: str | None = None, field_name: str = "--container") -> Container:
    """The container ``name`` in the engine named, or in the one engine that has it."""
    check_name(name, field_name)
    hits, silent = [], []
    for e in engines(engine):
        try:
            c = e.inspect(name)
        except ContainerError as err:
            if engine:  # the engine named cannot be asked
                raise ContainerError(f"{field_name}{str(err)[len('--container'):]}") from None
            silent.append(f"{e.name} not asked: {str(err).split(': ', 1)[1]}")
            continue
        if c is not None:
            hits.append(c)
    if not hits:
        where = engine or " or ".join(e.name for e in engines(engine))
        raise ContainerError(f"{field_name}: no container '{name}' in {where}"
                             + "".join(f" ({s})" for s in silent)
                             + ("" if os.geteuid() == 0 or engine == "docker" else
                                " (rootless Podman's containers are seen only by their own user)"))
    if len(hits) > 1:
        raise ContainerError(f"{field_name}: '{name}' is a container in both docker and podman; say which with --engine")
    return hits[0]


def resolve(name: str, engine: str | None = None, field_name: str = "--container") -> tuple[Container, Container]:
    """(the container named, the one that owns its network namespace): the same container,
    unless it runs in another's namespace (a pod's infra container, ``network_mode:
    container:``/``service:``).  Refusals are ContainerError, one line naming it."""
    c = find(name, engine, field_name)
    why = refusal(c)
    if why:
        raise ContainerError(f"{field_name}: {why}")
    owner, seen = c, {c.id}
    while owner.namespace_owner() is not None:
        owner = find(check_name(owner.namespace_owner(), field_name), c.engine, field_name)
        if owner.id in seen:
            raise ContainerError(f"{field_name}: {c.label()}: its network namespace's owners go round in a circle")
        seen.add(owner.id)
        why = refusal(owner)
        if why:
            raise ContainerError(f"{field_name}: {c.label()} uses the network of another: {why}")
    if netns_inode(c.pid) != netns_inode(owner.pid):
        raise ContainerError(f"{field_name}: {c.label()} and {owner.label()}, whose network it uses, are in "
                             f"different network namespaces (restarting?)")
    return c, owner


def netns_path(pid: int) -> str:
    return f"/proc/{pid}/ns/net"


def netns_inode(pid: int) -> tuple[int, int]:
    try:
        st = os.stat(netns_path(pid))
    except OSError as err:
        raise ContainerError(f"--container: process {pid} has gone ({err.strerror})") from None
    return st.st_dev, st.st_ino


# ---------------------------------------------------------------- its interface and veth


@dataclass(frozen=True)
class Wiring:
    """How the engine wired a container to one network: its device (in its namespace)
    and the host-side veth peer."""

    network: str
    inside: str  # the container's device, e.g. eth0
    inside_index: int
    veth: str  # the peer in the host's namespace
    veth_index: int
    addresses: tuple


def wiring(owner: Container, endpoint: Endpoint) -> Wiring:
    """The device of ``owner`` on ``endpoint``'s network and its host-side veth, read with
    netlink from both sides (``kernel.peers``): the device whose MAC address the engine
    reports; its peer by ``IFLA_LINK`` in the namespace ``IFLA_LINK_NETNSID`` names, which
    must be the host's; and that peer a veth whose own ``IFLA_LINK`` is the device, in the
    container's namespace."""
    label = owner.label()
    if not endpoint.mac:
        raise ContainerError(f"--container: {label} reports no MAC address on network '{endpoint.network}'")
    dev = peers.by_mac(netns_path(owner.pid), endpoint.mac)
    if dev is None:
        raise ContainerError(f"--container: {label} has no device with the MAC address "
                             f"{endpoint.mac} its engine reports on network '{endpoint.network}'")
    if dev.kind != "veth" or not dev.link or dev.link_nsid is None:
        raise ContainerError(f"--container: {label}'s {dev.name} is not one end of a veth pair "
                             f"into another namespace ({dev.kind or 'no kind'})")
    peer, nsid = peers.in_host(dev.link, netns_path(owner.pid))
    if peer is None or peer.kind != "veth" or peer.link != dev.index or peer.link_nsid != nsid:
        raise ContainerError(f"--container: the peer of {label}'s {dev.name} (index {dev.link}) is not a veth "
                             f"in this (the host's) network namespace")
    return Wiring(endpoint.network, dev.name, dev.index, peer.name, peer.index, endpoint.addresses())


GSO_MAX_SEGS = 65535  # what a veth takes unless told otherwise (the kernel's GSO_MAX_SEGS)


def single_segments(pid: int, index: int, on: bool = True) -> None:
    """The server use: the container's own device (``index`` in the namespace of ``pid``)
    hands its qdisc one TCP segment a packet (``on``), as the lab's devices do, so that
    the links on its veth meter each segment as a frame of its own (a packet of several
    would pass a token bucket at once and be paid for afterwards); ``on=False`` gives it
    back the kernel's default (clean)."""
    from pyroute2 import NetlinkError
    try:
        peers.gso_max_segs(netns_path(pid), index, 1 if on else GSO_MAX_SEGS)
    except (OSError, NetlinkError) as err:
        raise ContainerError(f"--container: cannot set gso_max_segs on the container's device ({err})") from None


# ---------------------------------------------------------------- --hosts container:NAME


def expand_hosts(text, *, server: Container | None, network: str | None, engine: str | None,
                 field_name: str = "--hosts") -> tuple[list[str], tuple]:
    """--hosts with every ``container:NAME`` replaced by that container's addresses on the
    network it shares with ``server`` (the --container; without one, on its one network or
    ``network``): (the items, ((name, (address, ...)), ...) for the record)."""
    out, named = [], []
    for item in host_items(text):
        if not item.lower().startswith(HOST_PREFIX):
            out.append(item)
            continue
        name = item[len(HOST_PREFIX):]
        c, owner = resolve(check_name(name, field_name), engine, field_name)
        net = shared_network(server, owner, network, field_name) if server is not None else \
            choose_network(owner, network, field_name).network
        addrs = owner.endpoint(net).addresses()
        if not addrs:
            raise ContainerError(f"{field_name}: {c.label()} has no address on network '{net}'")
        out.extend(str(a) for a in addrs)
        named.append((c.name, tuple(str(a) for a in addrs)))
    if not out:
        raise UsageError(f"{field_name}: none given (comma-separated names, addresses or container:NAME)")
    return out, tuple(named)
