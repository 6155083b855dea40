"""pytest fixtures for containers: a running Docker or Podman container behind an emulated
link for the length of a test (docs/fixtures.md, "Containers").

    @pytest.mark.container_link("web", hosts="container:client", profile="modem-28k8", no_delay="auto")
    def test_modem_users(container_link):
        d = container_link.fetch("/10000.bin", client="client")   # web's address, from client
        assert 0.95 < d.seconds / d.model_seconds(container_link.model) < 1.05

The fixture applies through ratelimit's own command line (``--container NAME`` and the
options given, run as ``python -m ratelimit``), so it takes and refuses exactly what ``ratelimit --container`` does, and a
refusal fails the test in that one line.  With ``hosts`` (or ``scenario``) the container is
the server of those clients; without, it is one user on a slow link (docs/containers.md).
After the test, passed or failed, ``--container NAME --clean`` removes the links.

``fetch`` runs the host's curl in the client container's network namespace (``nsenter
--net``): what the container's TCP sees, without curl in its image.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .measure import curl_argv, curl_failure, Download, read_curl

MARKER = "container_link"
OPTIONS = ("hosts", "scenario", "profile", "engine", "network", "mode", "per", "ports", "rate", "delay", "burst",
           "queue", "direction", "link", "no_delay")
_SELECT = ("engine", "network")  # they say which container and device, so --clean and --list take them too


def _cli(*argv: str) -> tuple[int, str, str]:
    """``ratelimit ARGV``, run as this Python's ``-m ratelimit``: (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-m", "ratelimit", *argv], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def _one_line(err: str) -> str:
    """ratelimit's one line (its last), without the program's name."""
    lines = [line for line in err.splitlines() if line.strip()]
    return lines[-1].removeprefix("ratelimit: ") if lines else "no message"


class ContainerLink:
    """A container's links for one test: what is applied (``applied``, ``model``), where
    (``use``, ``interface``), and downloads through them (``fetch``)."""

    def __init__(self, container: str, select: list[str], listed: dict, delay_left_out: bool):
        self.container = container
        self._select = select  # --container NAME [--engine E] [--network N]
        self.listed = listed  # ratelimit --container NAME --list --json, after the apply
        self.delay_left_out = delay_left_out

    @property
    def applied(self) -> dict:
        """What is applied (``summary.summary``: profile, mode, down/up, the container, named hosts)."""
        return self.listed["applied"]

    @property
    def use(self) -> str:
        """``server`` (links for ``hosts`` on its veth, facing it) or ``user`` (one link on its veth)."""
        return self.listed["container"]["use"]

    @property
    def interface(self) -> str:
        return self.listed["container"]["interface"]

    @property
    def engine(self) -> str:
        return self.applied["container"]["engine"]

    @property
    def network(self) -> str:
        return self.applied["container"]["network"]

    @property
    def model(self):
        """The link's ``ratelimit.spec.linkmodel.LinkModel`` on this kernel (no delay stage without
        sch_netem); with several cohorts, ``model_of(cohort)``."""
        cohorts = [c["name"] for c in self.applied.get("cohorts", ())]
        if len(cohorts) > 1:
            raise RuntimeError(f"{MARKER}: {len(cohorts)} cohorts are applied ({', '.join(cohorts)}); "
                               f"ask for one: model_of(name)")
        return self.model_of(None)

    def model_of(self, cohort: str | None):
        # the pytest plugin loads in every pytest session: the lab's parts only when a test asks
        from ..kernel.probe import probe
        from ..spec.linkmodel import LinkModel
        return LinkModel.from_summary(self.applied, cohort=cohort, delay_stage=probe(["netem"])["netem"])

    def _owner(self, name: str):
        # the pytest plugin loads in every pytest session: the lab's parts only when a test asks
        from ..containers.lookup import resolve
        return resolve(name, self.engine)[1]

    def address(self, name: str | None = None) -> str:
        """The address of container ``name`` (default: the one with the links) on the link's
        network: IPv4 if it has one."""
        owner = self._owner(name or self.container)
        found = owner.endpoint(self.network)
        if found is None or not (found.ipv4 or found.ipv6):
            raise RuntimeError(f"{MARKER}: {owner.label()} has no address on network '{self.network}'")
        return found.ipv4 or found.ipv6

    def url(self, path: str = "/", port: int = 80, server: str | None = None) -> str:
        """``http://ADDRESS[:port]/path`` of ``server`` (default: the container with the links)."""
        host = self.address(server)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}{'' if port == 80 else f':{port}'}/{path.lstrip('/')}"

    def fetch(self, url: str = "/10000.bin", client: str | None = None, *, timeout: float = 120) -> Download:
        """GET ``url`` (a full URL, or a path on the container with the links) with curl in
        ``client``'s network namespace.  ``client`` defaults to the container itself (one user)
        or, for a server, to the one container its ``hosts`` named."""
        if client is None:
            named = list(dict.fromkeys([*(self.applied.get("named") or {}),
                                        *(n for c in self.applied.get("cohorts", ()) for n in c.get("named") or {})]))
            if self.use == "user":
                client = self.container
            elif len(named) == 1:
                client = named[0]
            else:
                raise RuntimeError(f"{MARKER}: say which container fetches (client=; hosts named "
                                   f"{', '.join(named) or 'no container'})")
        if url.startswith("/"):
            url = self.url(url)
        argv = ["nsenter", f"--net=/proc/{self._owner(client).pid}/ns/net", "--", *curl_argv(url, timeout)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{MARKER}: download of {url} from {client} did not finish within {timeout:g} s") from None
        d = read_curl(url, client, r)
        if d is None:
            raise RuntimeError(f"{MARKER}: download of {url} from {client} failed: {curl_failure(r)}")
        return d

    def stats(self) -> dict:
        """``ratelimit --container NAME --stats --json`` of the device with the links: per
        (direction, host, port) bytes, packets, drops, overlimits, backlog."""
        code, out, err = _cli(*self._select, "--stats", "--json")
        if code != 0:
            raise RuntimeError(f"{MARKER}: {_one_line(err)}")
        return json.loads(out.splitlines()[0])

    def _close(self) -> str | None:
        """Remove the links; a one-line reason if that failed."""
        code, _, err = _cli(*self._select, "--clean")
        if code == 0:
            return None
        # a container that went: its veth went too (both uses' links are on it), the IFB device stays
        from ..containers.attach import gone_veths, turn
        with turn():
            if gone_veths(self.applied["container"]["id"]):
                return None
        return f"{self.container}: {_one_line(err)}"


def argv_of(container, options: dict) -> tuple[list[str], list[str], bool]:
    """(the apply's command line, the one that names the container and its device, whether
    the delay is left out) of the marker's or factory's options."""
    # the pytest plugin loads in every pytest session: the lab's parts only when a test asks
    from .link import LinkSpec
    from .nodelay import resolve_no_delay
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        pytest.fail(f"{MARKER}: {unknown[0]!r} is not an option ({', '.join(OPTIONS)})", pytrace=False)
    if not isinstance(container, str) or not container:
        pytest.fail(f"{MARKER}: name the container first, e.g. @pytest.mark.{MARKER}('web', profile='3g')",
                    pytrace=False)
    select = ["--container", container]
    for key in _SELECT:
        if options.get(key) is not None:
            select += [f"--{key}", str(options[key])]
    audience = options.get("scenario") is not None
    no_delay, left_out = resolve_no_delay(options.get("no_delay", False), options.get("profile"),
                                           options.get("delay"), audience)
    given = {k: v for k, v in options.items() if v is not None and k not in _SELECT + ("no_delay",)}
    given.update(LinkSpec(no_delay=no_delay, delay=given.pop("delay", None)).overrides())
    argv = list(select)
    for key, value in given.items():
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        argv += [f"--{key.replace('_', '-')}", text]
    return argv, select, left_out


def _make(container, options: dict) -> ContainerLink:
    argv, select, left_out = argv_of(container, options)
    code, _, err = _cli(*argv)
    if code != 0:
        pytest.fail(f"{MARKER}: {_one_line(err)}", pytrace=False)
    link = ContainerLink(container, select, {}, left_out)
    code, out, err = _cli(*select, "--list", "--json")
    listed = [json.loads(line) for line in out.splitlines() if line.strip()] if code == 0 else []
    link.listed = next((d for d in listed if d.get("applied")), {})
    if not link.listed:
        failed = link._close()
        pytest.fail(f"{MARKER}: {container}: applied, but --list does not show it "
                    f"({_one_line(err) if code else 'no links listed'}){'; ' + failed if failed else ''}",
                    pytrace=False)
    return link


@pytest.fixture
def make_container_link():
    """Factory: ``make_container_link("web", hosts="container:client", profile="modem-28k8")``
    -> ``ContainerLink``.  Every container's links it made are removed when the test ends,
    passed or failed."""
    made: list[ContainerLink] = []

    def make(container: str, **options) -> ContainerLink:
        link = _make(container, options)
        made.append(link)
        return link

    yield make
    errors = [e for e in (link._close() for link in reversed(made)) if e]
    if errors:
        pytest.fail(f"{MARKER}: removing the links failed: " + "; ".join(errors), pytrace=False)


@pytest.fixture
def container_link(request, make_container_link) -> ContainerLink:
    """The links ``@pytest.mark.container_link(NAME, ...)`` asks for (closest marker wins),
    removed after the test."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        pytest.fail(f"{MARKER}: the fixture needs @pytest.mark.{MARKER}(NAME, profile=...) naming the container",
                    pytrace=False)
    options = dict(marker.kwargs)
    args = list(marker.args)
    if len(args) > 1 or (args and "container" in options):
        pytest.fail(f"{MARKER}: name the container once, e.g. @pytest.mark.{MARKER}('web', profile='3g')",
                    pytrace=False)
    container = args[0] if args else options.pop("container", None)
    return make_container_link(container, **options)
