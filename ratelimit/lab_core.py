"""The namespace lab as a Python object: bring up, use, change and remove.

``ratelimit lab ...`` (``lab.py``) and the pytest fixtures (``pytest_plugin.py``)
are thin layers over ``Lab``.  The topology itself -- namespaces, veths, the
bridge, addresses, forwarding, finding leftovers by name -- is ``nstopo``'s;
this module adds what makes it a lab:

- clients' ephemeral ports: ``vagrant/provision/client.sh`` runs in every
  client namespace and sets ``net.ipv4.ip_local_port_range`` to ``PORTS``
  (default 10000-10999), the very range the router limits, so every
  connection a client opens is an emulated link;
- a web server in the server namespace: ``vagrant/provision/server.sh`` writes
  the fixed-size files (``docroot``) and starts a private nginx (its own
  configuration, pid and logs in the lab directory) or the built-in server;
- the profile on the router's client-facing interface (``lan0``), through
  ``service.apply`` with hosts = the clients' addresses, ports = ``PORTS``;
- lab names in ``/etc/netns/NS/hosts`` (``ip netns exec`` shows that file as
  ``/etc/hosts``), so ``curl http://server/10000.bin`` works on a client;
- a state file, ``$RATELIMIT_STATE_DIR/lab/NAME/lab.json`` (default
  ``/run/ratelimit/lab/NAME/lab.json``), next to the server's files.

``down(NAME)`` needs none of it: it finds the lab's namespaces, processes,
``/etc/netns`` entries, ratelimit state and files by name, so it also removes
what a killed ``lab up`` left behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from . import docroot, nstopo, profiles, service, state
from .errors import (ConflictError, FieldError, KernelMissing, NotFoundError, PermissionDenied,
                     RatelimitError, UsageError)
from .selectors import parse_ports

DEFAULT_NAME = "lab"
DEFAULT_PORTS = "10000-10999"  # the clients' ephemeral range = the range the router limits
DEFAULT_BURST = 1  # packets; v0.3's 5 (rate x 5 / 8 bytes) lets a 10 kB reply through at once
SERVER_PORT = 80
MODES = ("auto", "police", "shape")
SERVERS = ("auto", "nginx", "builtin", "none")
NETEM_FIELDS = ("delay", "jitter", "loss", "duplicate", "corrupt", "reorder")
HOSTS_DIR = Path("/etc/netns")

Say = Callable[[str], None]


class LabError(RatelimitError):
    """A lab step failed (the message says which and what was left)."""


# ---------------------------------------------------------------- paths and files


def labs_dir() -> Path:
    """``$RATELIMIT_STATE_DIR/lab`` or ``/run/ratelimit/lab``."""
    base = os.environ.get("RATELIMIT_STATE_DIR")
    return Path(base) / "lab" if base else Path("/run/ratelimit/lab")


def lab_path(name: str) -> Path:
    return labs_dir() / nstopo.check_name(name)


def _state_file(name: str) -> Path:
    return lab_path(name) / "lab.json"


def provision_dir() -> Path:
    """``vagrant/provision`` of the checkout, or where setup.py installed it."""
    here = Path(__file__).resolve().parent
    for d in (here.parent / "vagrant" / "provision",
              Path(sys.prefix) / "share" / "ratelimit" / "vagrant" / "provision"):
        if (d / "client.sh").is_file():
            return d
    raise NotFoundError("lab: the provisioning scripts (vagrant/provision/*.sh) are missing "
                        "from this installation; run ratelimit from its checkout")


def read_state(name: str) -> dict | None:
    try:
        return json.loads(_state_file(name).read_text())
    except (OSError, ValueError):
        return None


def _write_state(name: str, data: dict) -> None:
    path = _state_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def list_labs() -> list[str]:
    """Labs with a state file or namespaces on this machine."""
    names = set()
    if labs_dir().is_dir():
        names |= {p.parent.name for p in labs_dir().glob("*/lab.json")}
    for ns in nstopo.list_leftovers():
        m = re.match(rf"^{re.escape(nstopo.PREFIX)}([a-z0-9][a-z0-9_]*)-(router|server|c[0-9]+)$", ns)
        if m:
            names.add(m.group(1))
    return sorted(names)


@contextmanager
def _lock(name: str):
    """One lab command at a time per lab name (up, apply, clean, down)."""
    path = labs_dir() / f".{nstopo.check_name(name)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConflictError(f"lab '{name}' is busy: another `ratelimit lab` command is working "
                                f"on it (lock {path})") from None
        yield path
    finally:
        os.close(fd)


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True


# ---------------------------------------------------------------- validation


def check_clients(clients) -> int:
    try:
        n = int(clients)
    except (TypeError, ValueError):
        raise FieldError("--clients", f"'{clients}'", f"is not a whole number (1-{nstopo.MAX_CLIENTS})") from None
    if not 1 <= n <= nstopo.MAX_CLIENTS:
        raise FieldError("--clients", n, f"is more than the address plan holds (1-{nstopo.MAX_CLIENTS}: "
                         f"clients are {nstopo.LAN4}.2-{nstopo.LAN4}.{nstopo.MAX_CLIENTS + 1})"
                         if n > 0 else f"is not a number of clients (1-{nstopo.MAX_CLIENTS})")
    return n


def check_ports(ports: str) -> tuple[int, int]:
    """One range LOW-HIGH within 1024-65535: the clients' ephemeral ports."""
    parsed = parse_ports(ports, "--ports")
    if len(parsed) != 1 or parsed[0][0] == parsed[0][1]:
        raise FieldError("--ports", f"'{ports}'", "is not one range LOW-HIGH (the clients' ephemeral ports)")
    lo, hi = parsed[0]
    if lo < 1024:
        raise FieldError("--ports", f"'{ports}'", "starts below 1024 (ephemeral ports must be 1024-65535)")
    return lo, hi


def check_choice(field: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise FieldError(field, f"'{value}'", f"is not one of {', '.join(allowed)}")
    return value


def _server_kind(server: str) -> str:
    check_choice("--server", server, SERVERS)
    if server == "none":
        return server
    have_nginx = shutil.which("nginx") is not None
    if server == "auto":
        return "nginx" if have_nginx else "builtin"
    if server == "nginx" and not have_nginx:
        raise NotFoundError("--server: nginx is not installed (apt-get install nginx-light, "
                            "or use --server builtin)")
    return server


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PermissionDenied(f"lab {what}: needs root (it makes network namespaces); run with sudo")


# ---------------------------------------------------------------- the link


@dataclass(frozen=True)
class LinkSpec:
    """What the router applies: a profile (or none) and its overrides."""

    profile: str | None = None
    mode: str = "auto"  # auto: police if the kernel has act_police, else shape
    burst: int = DEFAULT_BURST
    rate: str | None = None
    delay: str | None = None
    no_delay: bool = False

    def overrides(self) -> dict:
        kw: dict = {}
        if self.no_delay:
            kw.update(delay="0ms", jitter="0ms", loss="0%", duplicate="0%", corrupt="0%", reorder="0%")
        if self.delay is not None:
            kw["delay"] = self.delay
        if self.rate is not None:
            kw["rate"] = self.rate
        return kw

    @property
    def empty(self) -> bool:
        return self.profile is None and self.rate is None and self.delay is None


def _features_needed(req) -> set[str]:
    from .compile import compile_plan
    return set(compile_plan(req).features())


def resolve_link(spec: LinkSpec, *, interface: str, netns: str | None, hosts: Sequence[str],
                 ports: str, say: Say | None = None, vm_hint: bool = True):
    """Validate ``spec`` against the kernel; return ``(request, mode)``.

    ``mode='auto'`` becomes police when the kernel has act_police, else shape
    (said through ``say``).  A missing netem, police, ifb or mirred is one
    ``KernelMissing`` line naming the module and the ways out.
    """
    from .probe import missing_message, probe
    check_choice("--mode", spec.mode, MODES)
    if spec.profile is not None:
        profiles.load(spec.profile)  # unknown profile: the profiles module's one line
    mode = spec.mode
    note = None
    if mode == "auto":
        mode = "police" if probe(["police"])["police"] else "shape"
        if mode == "shape":
            note = "lab: this kernel lacks act_police, so the rate is enforced by shaping (--mode shape)"
    req = service.make_request(interface, hosts=list(hosts), ports=ports, profile=spec.profile, netns=netns,
                               mode=mode, burst=spec.burst, **spec.overrides())
    if spec.no_delay and not (req.down.rate_bps or req.up.rate_bps):
        raise UsageError(f"--no-delay: profile '{spec.profile}' has no rate, so nothing would be left to "
                         f"emulate; run it with --vm (full kernel) instead")
    needed = _features_needed(req) & {"netem", "police", "ifb", "mirred", "htb", "u32", "ingress"}
    if _in_vm():
        _modprobe(needed)
    have = probe(sorted(needed))
    lacking = [f for f in ("netem", "police", "ifb", "mirred", "htb", "u32", "ingress")
               if f in needed and not have[f]]
    if lacking:
        if not set(lacking) <= {"netem", "police"}:
            raise KernelMissing(missing_message(lacking[0]), lacking[0])
        ways = []
        if "netem" in lacking:
            ways.append("--no-delay to leave the delay and loss out")
        if "police" in lacking:
            ways.append("--mode shape instead of police")
        if vm_hint:
            ways.append("--vm to run the lab in the full-kernel VM")
        what = f"profile '{spec.profile}'" if spec.profile else "this link"
        need = {"netem": "delay/loss (module sch_netem)", "police": "police mode (module act_police)"}
        raise KernelMissing(f"{what} needs {' and '.join(need[f] for f in lacking)}, which this kernel "
                            f"lacks: add {', or '.join(ways)}", lacking[0])
    if note and say:
        say(note)
    return req, mode


def _in_vm() -> bool:
    from .vm import in_vm
    return in_vm()


def _modprobe(features) -> None:
    from .probe import module_for
    for f in features:
        mod = module_for(f)
        if mod:
            subprocess.run(["modprobe", "-q", mod], capture_output=True, check=False)


# ---------------------------------------------------------------- results

MSS_BYTES = 1448  # TCP payload per frame on a 1500-byte MTU, with timestamps
FRAME_OVERHEAD = 66  # Ethernet 14 + IP 20 + TCP 32 bytes per frame
HTTP_OVERHEAD = 400  # response header, SYN-ACK, FIN and the like, roughly


def wire_bytes(payload: int) -> int:
    """Bytes a router counts for an HTTP response of ``payload`` bytes (no retransmissions)."""
    frames = -(-payload // MSS_BYTES)
    return payload + frames * FRAME_OVERHEAD + HTTP_OVERHEAD


def expected_seconds(payload: int, rate_bps: int, burst_pkts: int = DEFAULT_BURST, mtu: int = 1514) -> float:
    """How long a download of ``payload`` bytes takes over a link of ``rate_bps``:
    the link's burst (``rate x burst / 8`` bytes, at least one MTU, as
    ``Request.burst_bytes``) passes at once, the rest at the rate.  Handshake
    and delay not included."""
    burst = max(mtu, rate_bps * burst_pkts // 8)
    return max(0, wire_bytes(payload) - burst) * 8 / rate_bps



@dataclass(frozen=True)
class Download:
    """One HTTP download by curl from a client, timed."""

    url: str
    client: str
    http_code: int
    bytes: int
    seconds: float  # from starting to connect to the last byte
    connect_s: float  # TCP handshake: one round trip over the emulated link
    first_byte_s: float
    local_port: int

    @property
    def bps(self) -> float:
        """Payload bits per second over the whole download."""
        return self.bytes * 8 / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        return {**asdict(self), "bps": self.bps}


@dataclass(frozen=True)
class Host:
    """One machine of the lab: a namespace, its address and a way to run things there."""

    name: str  # client1.., router, server
    netns: str
    address: str
    address6: str
    lab: "Lab"

    def argv(self, argv: Sequence[str]) -> list[str]:
        return self.lab.topo.argv(self.netns, list(argv))

    def run(self, argv: Sequence[str], *, check: bool = False, timeout: float | None = 120,
            **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` here and wait (text output captured unless redirected)."""
        kw.setdefault("capture_output", "stdout" not in kw and "stderr" not in kw)
        kw.setdefault("text", True)
        return subprocess.run(self.argv(argv), check=check, timeout=timeout,
                              env={**os.environ, **self.lab.env(), **kw.pop("env", {})}, **kw)

    def popen(self, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start ``argv`` here without waiting; ``lab down`` stops it if still running."""
        return subprocess.Popen(self.argv(argv), env={**os.environ, **self.lab.env(), **kw.pop("env", {})},
                                **kw)


# ---------------------------------------------------------------- the lab


class Lab:
    """A namespace lab that is up.  ``Lab.up(...)`` makes one, ``Lab.open(name)``
    finds one, ``lab.down()`` (or ``down(name)``) removes it."""

    def __init__(self, topo: nstopo.Topology, info: dict):
        self.topo = topo
        self.info = info
        self.name = topo.name
        self.clients = [Host(f"client{i}", ns, a4, a6, self)
                        for i, (ns, a4, a6) in enumerate(zip(topo.clients, topo.client_addrs,
                                                             topo.client_addrs6), start=1)]
        self.router = Host("router", topo.router, topo.router_client_addr, topo.router_client_addr6, self)
        self.server = Host("server", topo.server, topo.server_addr, topo.server_addr6, self)
        self.hosts = {h.name: h for h in (*self.clients, self.router, self.server)}

    # -- making and finding ------------------------------------------------
    @classmethod
    def up(cls, name: str = DEFAULT_NAME, *, clients: int = 1, link: LinkSpec = LinkSpec(),
           server: str = "auto", ports: str = DEFAULT_PORTS, say: Say | None = None,
           progress: Callable[[int, int], None] | None = None) -> "Lab":
        """Build the lab and apply ``link``; on any failure remove everything again."""
        say = say or (lambda _msg: None)
        nstopo.check_name(name)
        n = check_clients(clients)
        lo, hi = check_ports(ports)
        kind = _server_kind(server)
        layout = nstopo.Topology.layout(name, n)
        _require_root("up")
        _check_not_up(name)  # early, so it is the only line; again under the lock below
        req = mode = None
        if not link.empty:  # every check on the link before anything is made
            req, mode = resolve_link(link, interface=layout.router_client_if, netns=layout.router,
                                     hosts=layout.client_addrs, ports=f"{lo}-{hi}", say=say)
        scripts = provision_dir()
        with _lock(name):
            _check_not_up(name)
            info = {"name": name, "clients": n, "ports": f"{lo}-{hi}", "phase": "starting",
                    "pid": os.getpid(), "created": time.time(), "dir": str(lab_path(name)),
                    "server": {"kind": kind, "port": SERVER_PORT, "address": layout.server_addr},
                    "link": None}
            with _terminate_as_exception():
                try:
                    _write_state(name, info)
                    say(f"lab up: {n} client namespace(s), router and server "
                        f"({layout.prefix}*) on 198.18.0.0/15")
                    topo = nstopo.Topology.create(name, n)
                    lab = cls(topo, info)
                    lab._write_hosts_files()
                    say(f"lab up: client ports {lo}-{hi} (net.ipv4.ip_local_port_range) and "
                        f"tools, via {scripts / 'client.sh'}")
                    for c in lab.clients:
                        lab._provision(c, scripts / "client.sh", RL_INSTALL="0", RL_PORTS=f"{lo}-{hi}")
                    if kind != "none":
                        say(f"lab up: {kind} server on http://{lab.server.address}/ via {scripts / 'server.sh'}")
                        lab._provision(lab.server, scripts / "server.sh", RL_INSTALL="0", RL_SERVER=kind,
                                       RL_SRC=str(Path(__file__).resolve().parent.parent),
                                       RL_PYTHON=sys.executable, RL_LAB_DIR=info["dir"],
                                       RL_PORT=str(SERVER_PORT), RL_NGINX_USER="root",
                                       RL_WORKERS=str(min(os.cpu_count() or 1, 4)))
                        info["server"]["pid"] = lab._server_pid()
                    if req is not None:
                        lab._apply(req, mode, link, say, progress)
                    info["phase"] = "up"
                    _write_state(name, info)
                    return lab
                except BaseException:
                    say(f"lab up: failed; removing lab '{name}'")
                    _remove(name)
                    raise

    @classmethod
    def open(cls, name: str = DEFAULT_NAME) -> "Lab":
        """The lab ``name`` as ``lab up`` left it; ``NotFoundError`` if it is not up."""
        nstopo.check_name(name)
        info = read_state(name)
        if info is None or info.get("phase") != "up":
            found = nstopo.lab_namespaces(name)
            if info is None and not found:
                up = list_labs()
                raise NotFoundError(f"--name: lab '{name}' is not up (labs up: {', '.join(up) or 'none'}; "
                                    f"start one with: ratelimit lab up --name {name})")
            raise NotFoundError(f"--name: lab '{name}' is incomplete (an interrupted `lab up` left it); "
                                f"remove it with: ratelimit lab down --name {name}")
        try:
            topo = nstopo.Topology.open(name)
        except NotFoundError:
            raise NotFoundError(f"--name: lab '{name}' has lost its namespaces; "
                                f"remove it with: ratelimit lab down --name {name}") from None
        return cls(topo, info)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # -- using -------------------------------------------------------------
    def host(self, name: str) -> Host:
        if name not in self.hosts:
            raise NotFoundError(f"HOST: '{name}' is not a host of lab '{self.name}' "
                                f"({', '.join(self.hosts)})")
        return self.hosts[name]

    def client(self, i: int = 1) -> Host:
        if not 1 <= i <= len(self.clients):
            raise NotFoundError(f"client: {i} is not a client of lab '{self.name}' (1-{len(self.clients)})")
        return self.clients[i - 1]

    def url(self, path: str = "/" + docroot.EXPERIMENT_FILE) -> str:
        return f"http://{self.server.address}:{self.info['server']['port']}/{path.lstrip('/')}" \
            if self.info["server"]["port"] != 80 else f"http://{self.server.address}/{path.lstrip('/')}"

    def env(self) -> dict[str, str]:
        """What ``lab exec`` adds to a command's environment."""
        return {"RL_LAB": self.name, "RL_LAB_SERVER": self.server.address,
                "RL_LAB_URL": self.url(), "RL_LAB_PORTS": self.info["ports"]}

    def exec(self, host: str, argv: Sequence[str], **kw) -> int:
        """Run ``argv`` on ``host`` with this terminal; return its exit status."""
        h = self.host(host)
        if not argv:
            raise UsageError("lab exec: no command given (ratelimit lab exec HOST -- COMMAND ...)")
        try:
            return subprocess.run(h.argv(argv), env={**os.environ, **self.env()}, check=False, **kw).returncode
        except FileNotFoundError as err:
            raise NotFoundError(f"lab exec: {err.strerror}: {argv[0]}") from None

    def download(self, url: str | None = None, client: int = 1, *, timeout: float = 120) -> Download:
        """Fetch ``url`` (a path on the lab server, or a full URL) with curl from a client."""
        url = self.url(url) if url is None or url.startswith("/") else url
        if shutil.which("curl") is None:
            raise NotFoundError("curl is missing: apt-get install curl")
        host = self.client(client)
        fmt = "%{http_code} %{size_download} %{time_connect} %{time_starttransfer} %{time_total} %{local_port}"
        try:
            r = host.run(["curl", "-sS", "-o", "/dev/null", "--max-time", f"{timeout:g}", "-w", fmt, url],
                         timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            raise LabError(f"download of {url} from {host.name} did not finish within {timeout:g} s") from None
        fields = r.stdout.split()
        if r.returncode != 0 or len(fields) != 6:
            raise LabError(f"download of {url} from {host.name} failed: "
                           f"{' '.join(r.stderr.split()) or 'curl exited ' + str(r.returncode)}")
        code, size, connect, first, total, port = fields
        return Download(url, host.name, int(code), int(size), float(total), float(connect), float(first),
                        int(port))

    def measure_rtt(self, client: int = 1, *, count: int = 3) -> float:
        """The round trip over the emulated link, in seconds: the median TCP
        handshake time from a client port in the limited range to the server."""
        times = sorted(self.download("/index.html", client).connect_s for _ in range(max(1, count)))
        return times[len(times) // 2]

    def statistics(self) -> dict:
        """``service.statistics`` of the router's client-facing interface."""
        return service.statistics(self.topo.router_client_if, self.topo.router)

    def link_status(self) -> dict | None:
        return service.status(self.topo.router_client_if, self.topo.router)

    def status(self) -> dict:
        """Hosts, addresses, what is applied and counters summed per client and direction."""
        hosts = [{"name": h.name, "netns": h.netns, "address": h.address, "address6": h.address6,
                  "interface": (self.topo.router_client_if if h is self.router else self.topo.client_if)}
                 for h in self.hosts.values()]
        stats = self.statistics()
        per: dict = {}
        for row in stats["links"]:
            key = (row["host"], row["direction"])
            agg = per.setdefault(key, {"host": row["host"], "direction": row["direction"], "links": 0,
                                       "active": 0, "bytes": 0, "packets": 0, "drops": 0,
                                       "overlimits": 0, "backlog_bytes": 0, "rate_bps": row.get("rate_bps")})
            agg["links"] += 1
            agg["active"] += 1 if row.get("bytes") else 0
            for k in ("bytes", "packets", "drops", "overlimits", "backlog_bytes"):
                agg[k] += row.get(k) or 0
        by_addr = {h.address: h.name for h in self.clients}
        totals = sorted(per.values(), key=lambda a: (a["host"], a["direction"]))
        for t in totals:
            t["client"] = by_addr.get(t["host"], t["host"])
        return {"name": self.name, "phase": self.info.get("phase"), "created": self.info.get("created"),
                "ports": self.info["ports"], "server": self.info["server"], "url": self.url(),
                "link": self.info.get("link"), "hosts": hosts, "applied": stats["applied"],
                "time": stats["time"], "totals": totals}

    # -- changing ----------------------------------------------------------
    def apply(self, link: LinkSpec, *, say: Say | None = None,
              progress: Callable[[int, int], None] | None = None) -> None:
        """Put ``link`` on the router's client-facing interface, live (atomic)."""
        say = say or (lambda _msg: None)
        req, mode = resolve_link(link, interface=self.topo.router_client_if, netns=self.topo.router,
                                 hosts=self.topo.client_addrs, ports=self.info["ports"], say=say,
                                 vm_hint=False)
        with _lock(self.name):
            self._apply(req, mode, link, say, progress)
            _write_state(self.name, self.info)

    def clean(self) -> bool:
        """Remove the link emulation (the lab stays up, links unimpaired)."""
        with _lock(self.name):
            removed = service.clean(self.topo.router_client_if, self.topo.router)
            self.info["link"] = None
            _write_state(self.name, self.info)
        return removed

    def down(self) -> dict:
        return down(self.name)

    # -- internals ---------------------------------------------------------
    def _apply(self, req, mode, link: LinkSpec, say: Say, progress) -> None:
        what = link.profile or "custom link"
        say(f"lab: applying {what} ({mode}) on {self.topo.router}/{req.interface} for "
            f"{len(req.hosts)} client(s) x ports {self.info['ports']} ({req.flow_count()} links)")
        t0 = time.monotonic()
        service.apply(req, progress=progress)
        say(f"lab: applied in {time.monotonic() - t0:.1f} s")
        self.info["link"] = {**asdict(link), "mode": mode, "summary": service.summary(req)}

    def _provision(self, host: Host, script: Path, **env) -> None:
        timeout = 600 if _in_vm() else 120  # software emulation is slow
        try:
            r = host.run(["env", "-i", f"PATH={os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
                          *(f"{k}={v}" for k, v in env.items()), "sh", str(script)], timeout=timeout)
        except subprocess.TimeoutExpired:
            raise LabError(f"lab up: {script.name} on {host.name} did not finish within {timeout} s") from None
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or [f"exited {r.returncode}"])[-1]
            raise LabError(f"lab up: {script.name} on {host.name} failed: {last}")

    def _server_pid(self) -> int | None:
        kind = self.info["server"]["kind"]
        pidfile = Path(self.info["dir"]) / kind / ("nginx.pid" if kind == "nginx" else "server.pid")
        for _ in range(50):
            try:
                return int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                time.sleep(0.05)
        return None

    def _write_hosts_files(self) -> None:
        """``/etc/netns/NS/hosts`` for every namespace: lab names resolve inside.
        IPv4 only: the router limits the clients' IPv4 addresses."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback",
                 f"{self.server.address} server", f"{self.router.address} router"]
        lines += [f"{c.address} {c.name}" for c in self.clients]
        text = "# written by ratelimit lab; removed by `ratelimit lab down`\n" + "\n".join(lines) + "\n"
        for ns in self.topo.namespaces:
            d = HOSTS_DIR / ns
            try:
                d.mkdir(parents=True, exist_ok=True)
                (d / "hosts").write_text(text)
            except OSError:  # a read-only /etc: names just do not resolve
                return


def _check_not_up(name: str) -> None:
    info = read_state(name)
    found = nstopo.lab_namespaces(name)
    if info is None and not found:
        return
    if info and info.get("phase") == "up":
        raise ConflictError(f"--name: lab '{name}' is already up (see: ratelimit lab status --name {name}; "
                            f"remove it with: ratelimit lab down --name {name})")
    if info and info.get("phase") == "starting" and _pid_alive(info.get("pid")):
        raise ConflictError(f"--name: lab '{name}' is being brought up by process {info.get('pid')}")
    raise ConflictError(f"--name: lab '{name}' was left over by an interrupted `lab up` "
                        f"({len(found)} namespace(s)); remove it with: ratelimit lab down --name {name}")


@contextmanager
def _terminate_as_exception():
    """SIGTERM (and SIGHUP) during ``lab up`` unwinds like Ctrl-C, so it cleans up."""
    def raise_(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    try:
        old = {s: signal.signal(s, raise_) for s in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _leftover_paths(name: str) -> list[Path]:
    """Files and directories of lab ``name`` outside the namespaces, found by name."""
    prefix = nstopo.lab_prefix(name)
    role = re.compile(rf"^{re.escape(prefix)}(router|server|c[0-9]+)$")
    found = []
    for base in (HOSTS_DIR, state.state_dir()):  # /etc/netns/NS, service state of NS
        if base.is_dir():
            found += sorted(p for p in base.iterdir() if role.match(p.name))
    found += [p for p in (lab_path(name),) if p.exists()]
    return found


def _remove(name: str) -> dict:
    """Remove everything of lab ``name``: processes, namespaces, files (no lock taken)."""
    namespaces = nstopo.lab_namespaces(name)
    pids = [p for ns in namespaces for p in nstopo.netns_pids(ns) if p != os.getpid()]
    removed = nstopo.destroy(name)  # kills what runs inside first
    paths = _leftover_paths(name)
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    try:
        HOSTS_DIR.rmdir()  # made for labs' hosts files; only if nothing else is in it
    except OSError:
        pass
    return {"name": name, "namespaces": removed, "processes": len(pids), "paths": [str(p) for p in paths]}


def down(name: str = DEFAULT_NAME) -> dict:
    """Remove lab ``name`` and everything it made, found by name; works after a
    crash or a killed ``lab up``.  Returns what was removed."""
    nstopo.check_name(name)
    _require_root("down")
    with _lock(name) as lock_path:
        result = _remove(name)
        lock_path.unlink(missing_ok=True)
    try:
        labs_dir().rmdir()  # only if empty: the last lab is gone
    except OSError:
        pass
    return result
