"""The namespace lab as a Python object: bring up, use, change and remove.

``ratelimit lab ...`` (``cli.py``) and the pytest fixtures (``pytest_plugin.py``) are thin
layers over ``Lab``.  The topology itself (namespaces, veths, the bridge, addresses,
forwarding, finding leftovers by name) is ``topology``'s; what ``lab up`` adds to make it a
lab (the clients' ports, the web server and its TCP start, names in ``/etc/hosts``) is
``provision``'s.  ``Lab`` applies the link through ``service.apply`` with hosts = the
clients' addresses and ports = the lab's, or an audience (``--mix``, ``--scenario``): the
clients spread over cohorts (``audience``), each client's cohort kept in the state file
(``store``; ``Lab.cohort_of``, ``Lab.link_model(client)``).

``store.down(NAME)`` needs none of it: it finds a lab by name, so it also removes what a
killed ``lab up`` left behind.  For example::

    with Lab.up("mylab", link=LinkSpec(profile="modem-56k")) as lab:
        print(lab.download("/10000.bin").seconds)
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from .. import service
from ..errors import NotFoundError, UsageError
from ..kernel import netns as kernel_netns
from ..kernel.probe import probe
from ..service import readout
from ..spec.linkmodel import LinkModel
from ..spec.summary import summary
from . import docroot, servertcp, store, topology
from .audience import client_cohorts, clients_needed
from .link import LinkSpec, resolve_link, Say
from .measure import client_totals, curl_failure, Download, download_argv, one_way_delays, read_curl
from .provision import (DEFAULT_PORTS, SERVER_PORT, check_clients, check_ports, client_addrs, LabError, provision,
                        provision_server, server_kind, terminate_as_exception, write_hosts_files)
from .store import DEFAULT_NAME, down, lab_path, list_labs, provision_dir, read_state


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

    def __init__(self, topo: topology.Topology, info: dict):
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
    def up(cls, name: str = DEFAULT_NAME, *, clients: int | None = None, link: LinkSpec = LinkSpec(),
           server: str = "auto", ports: str = DEFAULT_PORTS, server_tcp: str = servertcp.DEFAULT,
           say: Say | None = None, progress: Callable[[int, int], None] | None = None) -> "Lab":
        """Build the lab, start the server's TCP as ``server_tcp`` says (``servertcp.STARTS``) and
        apply ``link``; on any failure remove everything again.  ``clients`` None: one, or as
        many as ``link``'s scenario names (``audience.clients_needed``)."""
        say = say or (lambda _msg: None)
        topology.check_name(name)
        if clients is None:
            clients = 1
            if link.scenario is not None and link.mix is None:
                clients = clients_needed(link.scenario)
        n = check_clients(clients)
        lo, hi = check_ports(ports)
        kind = server_kind(server)
        tcp = servertcp.check(server_tcp)
        layout = topology.Topology.layout(name, n)
        store.require_root("up")
        topology.require_tools()  # the one line naming the package, before anything is made
        store.check_not_up(name)  # early, so it is the only line; again under the lock below
        req = mode = None
        if not link.empty:  # every check on the link before anything is made
            req, mode = resolve_link(link, interface=layout.router_client_if, netns=layout.router,
                                     clients=client_addrs(layout), ports=f"{lo}-{hi}", say=say)
        scripts = provision_dir()
        with store.lock(name):
            store.check_not_up(name)
            info = {"name": name, "clients": n, "ports": f"{lo}-{hi}", "phase": "starting",
                    "pid": os.getpid(), "created": time.time(), "dir": str(lab_path(name)),
                    "server": {"kind": kind, "port": SERVER_PORT, "address": layout.server_addr,
                               "tcp": {"name": tcp.name}},
                    "link": None}
            with terminate_as_exception():
                try:
                    store.write_state(name, info)
                    say(f"lab up: {n} client namespace(s), router and server "
                        f"({layout.prefix}*) on 198.18.0.0/15")
                    topo = topology.Topology.create(name, n)
                    lab = cls(topo, info)
                    write_hosts_files(lab)
                    say(f"lab up: client ports {lo}-{hi} (net.ipv4.ip_local_port_range) and "
                        f"tools, via {scripts / 'client.sh'}")
                    for c in lab.clients:
                        provision(c, scripts / "client.sh", RL_INSTALL="0", RL_PORTS=f"{lo}-{hi}")
                    provision_server(lab, scripts, say)
                    if req is not None:
                        lab._apply(req, mode, link, say, progress)
                    info["phase"] = "up"
                    store.write_state(name, info)
                    return lab
                except BaseException:
                    say(f"lab up: failed; removing lab '{name}'")
                    store.remove(name)
                    raise

    @classmethod
    def open(cls, name: str = DEFAULT_NAME) -> "Lab":
        """The lab ``name`` as ``lab up`` left it; ``NotFoundError`` if it is not up."""
        topology.check_name(name)
        info = read_state(name)
        if info is None or info.get("phase") != "up":
            found = topology.lab_namespaces(name)
            if info is None and not found:
                up = list_labs()
                raise NotFoundError(f"--name: lab '{name}' is not up (labs up: {', '.join(up) or 'none'}; "
                                    f"start one with: ratelimit lab up --name {name})")
            raise NotFoundError(f"--name: lab '{name}' is incomplete (an interrupted `lab up` left it); "
                                f"remove it with: ratelimit lab down --name {name}")
        try:
            topo = topology.Topology.open(name)
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
        """Fetch ``url`` (a path on the lab server, or a full URL) from a client: with curl, or
        without it ratelimit's own fetch (``measure.download_argv``)."""
        url = self.url(url) if url is None or url.startswith("/") else url
        host = self.client(client)
        try:
            r = host.run(download_argv(url, timeout)[1], timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            raise LabError(f"download of {url} from {host.name} did not finish within {timeout:g} s") from None
        d = read_curl(url, host.name, r)
        if d is None:
            raise LabError(f"download of {url} from {host.name} failed: {curl_failure(r)}")
        return d

    def handshakes(self, client: int = 1, *, count: int = 3) -> list[float]:
        """``count`` TCP handshake times (seconds, fastest first) from a client port in the
        limited range to the server: each one round trip over the emulated link."""
        return sorted(self.download("/index.html", client).connect_s for _ in range(max(1, count)))

    def one_way_delays(self, client: int = 1, *, count: int = 10, gap_s: float = 0.05,
                       timeout_s: float = 3) -> tuple[list[float], list[float]]:
        """One-way delays (seconds, fastest first) of ``count`` small UDP datagrams from the
        server to a client port in the limited range, and back from it: the emulated link's
        delay each way plus the path's own, without the process wakeups a handshake time holds
        (``measure.one_way_delays``)."""
        host = self.client(client)
        port = check_ports(self.info["ports"])[1]  # the range's last port, one emulated link
        topo = self.topo
        with topo.socket(host.name, socket.AF_INET, socket.SOCK_DGRAM) as near, \
                topo.socket("server", socket.AF_INET, socket.SOCK_DGRAM) as far:
            near.bind((host.address, port))
            far.bind((self.server.address, 0))
            down = one_way_delays(far, near, count, gap_s, timeout_s)
            up = one_way_delays(near, far, count, gap_s, timeout_s)
        return down, up

    def measure_rtt(self, client: int = 1, *, count: int = 3) -> float:
        """The round trip over the emulated link, in seconds: the median of ``handshakes``."""
        times = self.handshakes(client, count=count)
        return times[len(times) // 2]

    def statistics(self) -> dict:
        """``readout.statistics`` of the router's client-facing interface."""
        return readout.statistics(self.topo.router_client_if, self.topo.router)

    def wait_idle(self, timeout_s: float = 30, settle_s: float = 0.5) -> None:
        """Wait until every link's queue on the router is empty, then ``settle_s`` more (the
        last packet on its way): what TCP sent again at the end of a download would otherwise
        hold up the next connection's handshake on the same link."""
        deadline = time.monotonic() + timeout_s
        while any(r.get("backlog_bytes") for r in self.statistics()["links"]):
            if time.monotonic() > deadline:
                raise LabError(f"lab '{self.name}': the router's queues still hold packets after {timeout_s:g} s")
            time.sleep(0.2)
        time.sleep(settle_s)

    def status(self) -> dict:
        """Hosts, addresses, what is applied (each client's cohort and profile) and counters
        summed per client and direction."""
        members = (self.info.get("link") or {}).get("clients") or {}
        hosts = [{"name": h.name, "netns": h.netns, "address": h.address, "address6": h.address6,
                  "interface": (self.topo.router_client_if if h is self.router else self.topo.client_if),
                  **({"cohort": (members.get(h.name) or {}).get("cohort"),
                      "profile": (members.get(h.name) or {}).get("profile")} if h in self.clients else {})}
                 for h in self.hosts.values()]
        stats = self.statistics()
        totals = client_totals(stats["links"], [(c.name, c.address, c.address6) for c in self.clients])
        return {"name": self.name, "phase": self.info.get("phase"), "created": self.info.get("created"),
                "ports": self.info["ports"], "server": self.info["server"], "url": self.url(),
                "link": self.info.get("link"), "hosts": hosts, "applied": stats["applied"],
                "time": stats["time"], "totals": totals}

    # -- changing ----------------------------------------------------------
    def apply(self, link: LinkSpec, *, say: Say | None = None,
              progress: Callable[[int, int], None] | None = None) -> str:
        """Put ``link`` on the router's client-facing interface, live (atomic); returns how
        (``service.apply``'s ``how``: "built", "in place" or "make-before-break")."""
        say = say or (lambda _msg: None)
        req, mode = resolve_link(link, interface=self.topo.router_client_if, netns=self.topo.router,
                                 clients=client_addrs(self.topo), ports=self.info["ports"], say=say,
                                 vm_hint=False)
        with store.lock(self.name):
            how = self._apply(req, mode, link, say, progress)
            store.write_state(self.name, self.info)
        return how

    def clean(self) -> bool:
        """Remove the link emulation (the lab stays up, links unimpaired)."""
        with store.lock(self.name):
            removed = service.clean(self.topo.router_client_if, self.topo.router)
            self.info["link"] = None
            store.write_state(self.name, self.info)
        return removed

    def down(self) -> dict:
        return down(self.name)

    # -- internals ---------------------------------------------------------
    def _apply(self, req, mode, link: LinkSpec, say: Say, progress) -> str:
        if len(req.cohorts) == 1:
            links = f"{mode}, per {req.only.per}"
        else:
            links = f"{mode}; cohorts " + ", ".join(f"{c.name} ({c.profile or 'custom'}, per {c.per})"
                                                     for c in req.cohorts)
        say(f"lab: applying {link.what()} ({links}) on {self.topo.router}/{req.interface} for "
            f"{len(self.clients)} client(s) x ports {self.info['ports']} ({req.link_count()} links each way)")
        t0 = time.monotonic()
        how = service.apply(req, progress=progress).how
        say(f"lab: applied in {time.monotonic() - t0:.1f} s ({how})")
        applied = summary(req)
        self.info["link"] = {**asdict(link), "mode": mode, "summary": applied,
                             "clients": client_cohorts(applied, [(c.name, c.address, c.address6)
                                                                 for c in self.clients])}
        self._match_clients(req)
        return how

    def _match_clients(self, req) -> None:
        """Make each client the kind of host its cohort's link model assumes: no TCP timestamps
        behind header compression (a 1990s stack; linkmodel.LinkModel.timestamps); a client
        no cohort selects keeps them."""
        for c in self.clients:
            cohort = req.cohort(self.cohort_of(c.name) or "")
            kernel_netns.set_sysctl(c.netns, "net.ipv4.tcp_timestamps", 0 if cohort and cohort.link.vj else 1)

    def cohort_of(self, client: int | str) -> str | None:
        """The cohort of the applied link that ``client`` (a number or ``clientN``) is in;
        None if none selects it."""
        name = client if isinstance(client, str) else self.client(client).name
        link = self.info.get("link") or {}
        if "clients" not in link:  # a state file written before audiences: one cohort for all
            cohorts = (link.get("summary") or {}).get("cohorts") or [{}]
            return cohorts[0].get("name")
        if name not in link["clients"]:
            raise NotFoundError(f"client: '{name}' is not a client of lab '{self.name}' "
                                f"(client1-client{len(self.clients)})")
        entry = link["clients"][name]
        return entry["cohort"] if entry else None

    def link_model(self, client: int | str | None = None, *, cohort: str | None = None):
        """The applied link's ``LinkModel`` on this kernel (no delay stage without sch_netem):
        of ``client``'s cohort (a number or ``clientN``), of the cohort named ``cohort``, or of
        the link's one cohort."""
        link = self.info.get("link")
        if not link:
            raise LabError(f"lab '{self.name}' has no link applied")
        cohorts = [c["name"] for c in link["summary"].get("cohorts", ())]
        if client is not None:
            cohort = self.cohort_of(client)
            if cohort is None:
                raise LabError(f"lab '{self.name}': {client if isinstance(client, str) else f'client{client}'} "
                               f"is in no cohort (its links are unimpaired)")
        elif cohort is None and len(cohorts) > 1:
            raise LabError(f"lab '{self.name}' applies {len(cohorts)} cohorts ({', '.join(cohorts)}): "
                           f"name a client or a cohort for its link model")
        if cohort is not None and cohort not in cohorts:
            raise NotFoundError(f"cohort: '{cohort}' is not a cohort of lab '{self.name}' ({', '.join(cohorts)})")
        delay_stage = probe(["netem"])["netem"]
        if len(cohorts) <= 1:
            return LinkModel.from_summary(link["summary"], delay_stage=delay_stage)
        return LinkModel.from_summary(link["summary"], cohort=cohort, delay_stage=delay_stage)
