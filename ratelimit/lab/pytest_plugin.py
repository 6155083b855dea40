"""pytest fixtures: run your server behind emulated links and test what users see.

Loaded automatically once ratelimit is installed (entry point ``pytest11``:
``ratelimit = ratelimit.lab.pytest_plugin``), or with ``-p ratelimit.lab.pytest_plugin``.
Needs root (network namespaces)::

    @pytest.mark.emulated_link(profile="modem-28k8", clients=2)
    def test_slow_clients(emulated_link):
        link = emulated_link
        link.run_server(["python3", "-m", "http.server", "8000"], port=8000)
        d = link.measure_download("/", port=8000)       # from client 1, over its modem
        assert d.seconds < 5

Fixtures:

``emulated_link``
    A namespace lab (``ratelimit.lab.core.Lab``) made for the test and removed
    after it, whatever happens.  Configure it with the marker
    ``@pytest.mark.emulated_link(profile=None, clients=1, mode="shape", per="host",
    rate=None, delay=None, no_delay=False, burst=None, queue=None, bandwidth=None, ports="10000-10099",
    server="none", server_tcp="linux", mix=None, profiles=None, scenario=None)``: a client is one
    person behind one link (``per="host"``);
    ``per="port"`` makes every connection its own link, as v0.3's benchmark clients;
    ``server_tcp`` is how the server namespace's TCP starts: "linux", "rfc6298" or "2000"
    (``ratelimit.lab.servertcp``; ``link.server_tcp`` says what is in effect).
    An audience instead of one profile: ``mix="modem-28k8:50%,3g:50%"`` splits the
    clients between profiles (in order, by largest remainder); ``profiles=[...]`` gives
    each client its own (one per client; ``clients`` defaults to their number);
    ``scenario=`` a scenario file or shipped name.  ``link.cohort(i)``, ``link.model_of(i)``
    and ``link.expected_seconds(n, client=i)`` then tell a client's cohort and link model.
    Links that change over time: ``trace_down=``, ``trace_up=`` (mahimahi traces) or
    ``schedule=``, with ``trace_scale=``, ``phase=`` and ``phase_seed=``, as on the command
    line (docs/profiles.md, Traces); the router's trace driver runs while the lab is up.
``make_emulated_link``
    The factory behind it: ``make_emulated_link(profile=..., clients=...)``, as
    many labs as a test needs, all removed afterwards.
``container_link`` and ``make_container_link``
    A running Docker or Podman container behind an emulated link, as the server of
    other containers or as one user (``ratelimit --container``; ``container_link.py``).

``no_delay="auto"`` leaves out a profile's delay and loss when the kernel lacks
netem (with a warning, and ``link.delay_left_out`` set), so one test file
runs on full kernels and on trimmed ones.  See docs/fixtures.md.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest

from ..kernel.proc import stop
from . import container_link as _containers, nodelay
from .servertcp import DEFAULT as DEFAULT_SERVER_TCP

MARKER = "emulated_link"
_OPTIONS = ("profile", "clients", "mode", "per", "rate", "delay", "no_delay", "burst", "queue", "bandwidth", "ports",
            "server", "server_tcp", "mix", "profiles", "scenario", "trace_down", "trace_up", "schedule", "trace_scale",
            "phase", "phase_seed")
_counter = itertools.count(1)
DEFAULT_PORTS = "10000-10099"  # 100 links per client: quick to build even in shape mode

_CONNECT_TIMER = r"""
import json, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times = []
for _ in range(count):
    t0 = time.perf_counter()
    s = socket.create_connection((host, port), timeout=60)
    times.append(time.perf_counter() - t0)
    s.close()
print(json.dumps(times))
"""


EmulatedLinkWarning = nodelay.EmulatedLinkWarning  # a test suite may filter it by this name


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(profile=None, clients=1, mode='shape', per='host', rate=None, delay=None, no_delay=False, "
        f"burst=None, queue=None, bandwidth=None, ports='{DEFAULT_PORTS}', server='none', "
        f"server_tcp='{DEFAULT_SERVER_TCP}', "
        "mix=None, profiles=None, scenario=None): "
        "the link the emulated_link fixture emulates and how its server's TCP starts "
        "(ratelimit; see docs/fixtures.md)")
    config.addinivalue_line(
        "markers",
        f"{_containers.MARKER}(NAME, hosts=None, profile=None, engine=None, network=None, no_delay=False, ...): "
        "the links the container_link fixture puts on a running container (ratelimit --container NAME; "
        "docs/fixtures.md, Containers)")


class EmulatedLink:
    """One lab for a test: clients behind emulated links, a router, a server.

    ``server`` and ``client(i)`` are hosts (``.address``, ``.run(argv)``,
    ``.popen(argv)``); the measurements run real traffic through the router.
    """

    def __init__(self, lab, *, delay_left_out: bool = False):
        self.lab = lab
        self.name = lab.name
        self.delay_left_out = delay_left_out
        self._servers: list[subprocess.Popen] = []

    # -- hosts -------------------------------------------------------------
    @property
    def server(self):
        return self.lab.server

    @property
    def router(self):
        return self.lab.router

    @property
    def clients(self):
        return list(self.lab.clients)

    def client(self, i: int = 1):
        return self.lab.client(i)

    @property
    def ports(self) -> tuple[int, int]:
        lo, hi = self.lab.info["ports"].split("-")
        return int(lo), int(hi)

    @property
    def server_tcp(self) -> dict:
        """How the server's TCP starts, read back from the kernel: ``name``, ``rto_min_ms``,
        ``initcwnd_segments``, ``congestion_control`` (``ratelimit.lab.servertcp``)."""
        return self.lab.info["server"]["tcp"]

    @property
    def applied(self) -> dict | None:
        """What the router applies (``summary.summary``: profile, mode, down/up parameters)."""
        link = self.lab.info.get("link")
        return link["summary"] if link else None

    @property
    def model(self):
        """The link's ``ratelimit.spec.linkmodel.LinkModel`` on this kernel: how long things should take
        (a link of one cohort; with a mix, ``model_of(client)``)."""
        link = self.lab.info.get("link")
        if link and len(link["summary"].get("cohorts", ())) > 1:
            raise RuntimeError(f"emulated_link: {len(link['summary']['cohorts'])} cohorts are applied; "
                               f"ask for a client's model: link.model_of(i)")
        if not link or not link["summary"]["down"].get("rate_bps"):
            raise RuntimeError("emulated_link: no rate is applied, so no time is expected")
        return self.lab.link_model()

    def trace_seconds(self, nbytes: int, at: float, client: int = 1, mss_bytes: int = 1448) -> float:
        """How long a download of ``nbytes`` of payload that started at ``at`` (``time.time()``)
        takes on client ``client``'s traced downlink: until the capacity its trace or schedule
        gives from then has carried the payload in full-size segments (``mss_bytes`` each, on
        the wire a full frame as the trace counts it: ``capacity``), TCP's own start left out."""
        # the pytest plugin loads in every pytest session: the lab's parts only when a test asks
        from ..state import records
        from ..profiles import traced
        from ..traces.capacity import FULL_IP_BYTES, carried_by_ms
        from ..traces.tracefile import PACKET_BYTES
        from ..plan.compile import compile_plan
        from ..driver.steps import traced_links
        req = records.load(self.lab.topo.router, self.lab.topo.router_client_if).request
        loaded = traced.load_all(req)
        host = self.client(client).address
        links = [link for link in traced_links(compile_plan(req), loaded)
                 if link.direction == "dest" and str(link.host) == host]
        if not links:
            raise RuntimeError(f"emulated_link: client {client}'s downlink follows no trace")
        link = links[0]
        # a full-size packet is an opportunity of a trace, a frame of a schedule's line (Ethernet)
        frames = -(-nbytes // mss_bytes) * (PACKET_BYTES if link.source.kind == "trace" else FULL_IP_BYTES + 14)
        t0 = at * 1000 - req.traced_start_ms - link.offset_ms
        done = carried_by_ms(link.capacity, t0, frames)
        if done is None:
            raise RuntimeError(f"emulated_link: the trace does not carry {nbytes} bytes within a day")
        return (done - t0) / 1000

    def cohort(self, client: int = 1) -> dict | None:
        """Client ``client``'s cohort: ``{"cohort": name, "profile": name}``, or None when no
        cohort selects it (its links are unimpaired)."""
        entries = (self.lab.info.get("link") or {}).get("clients") or {}
        return entries.get(self.client(client).name)

    @property
    def cohorts(self) -> dict[str, dict | None]:
        """Every client's cohort (``cohort(i)``), by client name."""
        return {c.name: self.cohort(i) for i, c in enumerate(self.clients, 1)}

    def model_of(self, client: int = 1):
        """Client ``client``'s ``LinkModel``: its cohort's link on this kernel."""
        return self.lab.link_model(client)

    def expected_seconds(self, nbytes: int, client: int | None = None) -> float:
        """How long an HTTP download of ``nbytes`` should take on the link (of ``client``'s
        cohort, if given), from connect to the last byte (``model.fetch_seconds``;
        ``Download.model_seconds(link.model_of(i))`` uses a measured download's own header
        and request sizes)."""
        return (self.model if client is None else self.model_of(client)).fetch_seconds(nbytes)

    def url(self, path: str = "/", port: int = 80) -> str:
        host = self.server.address
        return f"http://{host}{'' if port == 80 else f':{port}'}/{path.lstrip('/')}"

    # -- servers -----------------------------------------------------------
    def run_server(self, argv: Sequence[str], port: int, *, wait_s: float = 60.0, **popen_kw) -> subprocess.Popen:
        """Start ``argv`` in the server namespace and wait until something listens
        on ``port`` there.  It is stopped when the test ends."""
        popen_kw.setdefault("stdin", subprocess.DEVNULL)
        proc = self.server.popen(list(argv), **popen_kw)
        self._servers.append(proc)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"emulated_link: server {argv[0]} exited with status {proc.returncode} "
                                   f"before listening on port {port}")
            r = self.server.run(["ss", "-Hltn", f"sport = :{port}"], timeout=10)
            if r.stdout.strip():
                return proc
            time.sleep(0.05)
        raise RuntimeError(f"emulated_link: nothing listens on port {port} in the server namespace "
                           f"{wait_s:g} s after starting {argv[0]}")

    # -- measurements ------------------------------------------------------
    def measure_download(self, url: str = "/10000.bin", client: int = 1, *, port: int = 80,
                         timeout: float = 120):
        """GET ``url`` (a path on the server, or a full URL) from a
        client; returns ``Download`` (``.seconds``, ``.bytes``, ``.bps``,
        ``.connect_s``, ``.first_byte_s``, ``.local_port``, ``.http_code``)."""
        if url.startswith("/"):
            url = self.url(url, port)
        return self.lab.download(url, client, timeout=timeout)

    def measure_rtt(self, client: int = 1, *, port: int = 80, count: int = 3) -> float:
        """Median TCP handshake time (seconds) from a client to ``port`` on the
        server: one round trip over the emulated link, serialization included."""
        r = self.client(client).run([sys.executable, "-c", _CONNECT_TIMER, self.server.address,
                                     str(port), str(count)], timeout=60 + 60 * count)
        if r.returncode != 0:
            raise RuntimeError(f"emulated_link: connecting from client{client} to {self.server.address} "
                               f"port {port} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        times = sorted(json.loads(r.stdout))
        return times[len(times) // 2]

    def stats(self) -> dict:
        """``readout.statistics`` of the router's client-facing interface: per
        (direction, host, port) bytes, packets, drops, overlimits, backlog."""
        return self.lab.statistics()

    def wait_idle(self, timeout_s: float = 30) -> None:
        """Wait until the router's queues are empty (``Lab.wait_idle``): between timed
        downloads on a slow link, so that what TCP sent again at the end of one does not
        hold up the next one's handshake."""
        self.lab.wait_idle(timeout_s)

    def totals(self) -> list[dict]:
        """Counters summed per client and direction (as ``ratelimit lab status``)."""
        return self.lab.status()["totals"]

    # -- changes -----------------------------------------------------------
    def apply(self, profile: str | None = None, **options) -> None:
        """Change the link live (options as the marker's: mode, per, rate, delay, no_delay, burst, queue,
        bandwidth, mix, scenario)."""
        # the pytest plugin loads in every pytest session: the lab's parts only when a test asks
        from .link import LinkSpec
        audience = options.get("mix") is not None or options.get("scenario") is not None
        options["no_delay"], _ = nodelay.resolve_no_delay(options.get("no_delay", False), profile, options.get("delay"),
                                                   audience)
        self.lab.apply(LinkSpec(profile=profile, **options))

    def _close(self) -> None:
        for proc in self._servers:
            stop(proc)
        self.lab.down()


def _make(name: str, *, profile=None, clients=None, mode="shape", per="host", rate=None, delay=None, no_delay=False,
          burst=None, queue=None, bandwidth=None, ports=None, server="none", server_tcp=DEFAULT_SERVER_TCP, mix=None,
          profiles=None, scenario=None, workdir=None, **traces) -> EmulatedLink:
    # the pytest plugin loads in every pytest session: the lab's parts only when a test asks
    from ..errors import RatelimitError
    from .core import Lab
    from .link import LinkSpec
    if profiles is not None:
        clients, scenario = _per_client(profiles, clients, per, ports or DEFAULT_PORTS, profile, mix, scenario,
                                        workdir, name)
    no_delay, left_out = nodelay.resolve_no_delay(no_delay, profile, delay, mix is not None or scenario is not None)
    try:
        lab = Lab.up(name, clients=clients, server=server, ports=ports or DEFAULT_PORTS, server_tcp=server_tcp,
                     link=LinkSpec(profile=profile, mode=mode, per=per, burst=burst, rate=rate, delay=delay,
                                   no_delay=no_delay, queue=queue, bandwidth=bandwidth, mix=mix,
                                   scenario=scenario, **traces))
    except RatelimitError as err:
        pytest.fail(f"emulated_link: {err}", pytrace=False)
    return EmulatedLink(lab, delay_left_out=left_out)


def _per_client(profiles, clients, per: str, ports: str, profile, mix, scenario, workdir, name) -> tuple[int, str]:
    """``profiles=[...]``, one per client, as a scenario file of one cohort per profile
    selecting its clients by name: (the number of clients, the file's path)."""
    if isinstance(profiles, str) or not isinstance(profiles, (list, tuple)) or not profiles \
            or not all(isinstance(p, str) and p for p in profiles):
        pytest.fail(f"{MARKER}: profiles={profiles!r} is not a list of profile names, one per client",
                    pytrace=False)
    if profile is not None or mix is not None or scenario is not None:
        pytest.fail(f"{MARKER}: profiles= gives each client its profile; leave out profile, mix and scenario",
                    pytrace=False)
    if clients is not None and clients != len(profiles):
        pytest.fail(f"{MARKER}: clients={clients!r} but profiles= names {len(profiles)} (one per client)",
                    pytrace=False)
    lines = [f'description = "one profile per client: {", ".join(profiles)}"']
    for kind in dict.fromkeys(profiles):
        members = [f'"client{i}"' for i, p in enumerate(profiles, 1) if p == kind]
        lines += [f'[cohort."{kind}"]', f'description = "{kind}"', f"hosts = [{', '.join(members)}]",
                  f'profile = "{kind}"', f'per = "{per}"', f'ports = "{ports}"']
    path = workdir / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return len(profiles), str(path)


@pytest.fixture
def make_emulated_link(tmp_path_factory):
    """Factory: ``make_emulated_link(profile="modem-28k8", clients=2, ...)`` -> ``EmulatedLink``.
    Every lab it made is removed when the test ends, passed or failed."""
    made: list[EmulatedLink] = []
    workdir = tmp_path_factory.mktemp("emulated_link")

    def make(**options) -> EmulatedLink:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            pytest.fail(f"make_emulated_link: {unknown[0]!r} is not an option ({', '.join(_OPTIONS)})",
                        pytrace=False)
        name = f"pt{os.getpid() % 100000}_{next(_counter)}"
        link = _make(name, workdir=workdir, **options)
        made.append(link)
        return link

    yield make
    errors = []
    for link in reversed(made):
        try:
            link._close()
        except Exception as err:  # remove the others anyway  # noqa: BLE001
            errors.append(f"{link.name}: {err}")
    if errors:
        pytest.fail("emulated_link: removing the lab failed: " + "; ".join(errors), pytrace=False)


@pytest.fixture
def emulated_link(request, make_emulated_link) -> EmulatedLink:
    """A lab configured by ``@pytest.mark.emulated_link(...)`` (closest marker wins;
    without a marker: one client, links unimpaired), removed after the test."""
    marker = request.node.get_closest_marker(MARKER)
    options = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        if len(marker.args) > 1 or "profile" in options:
            pytest.fail(f"{MARKER}: give the profile once, e.g. @pytest.mark.{MARKER}('modem-28k8', clients=2)",
                        pytrace=False)
        options["profile"] = marker.args[0]
    return make_emulated_link(**options)


# a container behind an emulated link (ratelimit --container): lab/container_link.py
container_link = _containers.container_link
make_container_link = _containers.make_container_link
