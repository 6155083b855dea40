"""What the container tests share (a pytest plugin, loaded by conftest): dockerd started
without an init system and the test image in both engines (``engines_up``, once per
worker: the tests are one xdist group), each engine's own network (``engine``), a state
directory per test (``ct_state``), and helpers that run engines and ratelimit.

Everything a test starts has a name of its own (``rlct-``, ``rlct2-``) and is removed by
that name after it, passed or failed; the networks are bridges of their own in
198.18.0.0/15 with no gateway, NAT or firewall rule.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratelimit.kernel.probe import probe
from ratelimit.lab.measure import curl_argv, curl_failure, read_curl
from ratelimit.spec.linkmodel import LinkModel

ROOT = Path(__file__).resolve().parent.parent
ENGINES_SH = ROOT / "containers" / "engines.sh"
CNI_DIR = Path("/etc/cni/net.d")
# limits root may set in our VMs (containers/containers.conf says why)
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "containers" / "containers.conf")}
PREFIX = "rlct-"
# (network, IPv4 subnet, bridge, IPv6 subnet or None)
NETWORKS = {"docker": ("rlct-net", "198.18.240.0/24", "rlct-d0", None),
            "podman": ("rlct-net", "198.18.241.0/24", "rlct-p0", None)}
NETWORKS6 = {"docker": ("rlct2-net6", "198.18.247.0/24", "rlct2-d6", "2001:db8:247::/64"),
             "podman": ("rlct2-net6", "198.18.248.0/24", "rlct2-p6", "2001:db8:248::/64")}
WEB_CMD = ("mkdir -p /srv && head -c 10000 /dev/zero > /srv/10000.bin && head -c 100000 /dev/zero > /srv/100000.bin && "
           "printf 'server { listen 80; LISTEN6root /srv; access_log off; }\\n' > /etc/nginx/sites-enabled/default && "
           "exec nginx -g 'daemon off;'")


def sh(*argv, check=True, env=None, timeout=120):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def ratelimit(*argv, env=None):
    return sh(sys.executable, "-m", "ratelimit", *argv, check=False, env=env)


@pytest.fixture(scope="session")
def engines_up():
    """dockerd (if docker is installed) and the test image in both engines: its name."""
    for tool in ("docker", "podman", "mmdebstrap"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: bash .ci/install installs it")
    if os.geteuid() != 0:
        pytest.fail("needs root (container engines, namespaces)")
    sh("sh", ENGINES_SH, "start", timeout=60)
    try:
        yield sh("sh", ENGINES_SH, "image", timeout=900).stdout.strip()
    finally:
        sh("sh", ENGINES_SH, "stop", check=False, timeout=60)


class Engine:
    """One engine as the tests use it: its own network, containers named rlct-*, all
    removed by name afterwards."""

    def __init__(self, name, image, ipv6=False):
        self.name, self.image = name, image if name == "docker" else f"localhost/{image}"
        self.net, self.subnet, self.bridge, self.subnet6 = (NETWORKS6 if ipv6 else NETWORKS)[name]
        self.made = []

    def __call__(self, *args, check=True):
        return sh(self.name, *args, check=check, env=PODMAN_ENV if self.name == "podman" else None)

    def network(self):
        if self.name == "docker":
            self("network", "rm", self.net, check=False)
            v6 = ["--ipv6", "--subnet", self.subnet6] if self.subnet6 else []
            self("network", "create", "--driver", "bridge", "--subnet", self.subnet, *v6, "--internal",
                 "-o", f"com.docker.network.bridge.name={self.bridge}", self.net)
        else:  # a CNI bridge of its own: no gateway, no masquerading, no firewall or portmap plugin
            ranges = [[{"subnet": s}] for s in (self.subnet, self.subnet6) if s]
            conf = {"cniVersion": "0.4.0", "name": self.net, "plugins": [
                {"type": "bridge", "bridge": self.bridge, "isGateway": False, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": ranges}}]}
            (CNI_DIR / f"{self.net}.conflist").write_text(json.dumps(conf, indent=1))

    def run(self, name, *args, network=None):
        self.made.append(name)
        self.rm(name)
        return self("run", "-d", "--name", name, "--network", network or self.net, *args)

    def rm(self, name):
        self("rm", "-f", *(["-t", "0"] if self.name == "podman" else []), name, check=False)

    def pid(self, name):
        return int(self("inspect", "-f", "{{.State.Pid}}", name).stdout)

    def address(self, name):
        return self.address_on(name, self.net)

    def address_on(self, name, network, key="IPAddress"):
        data = json.loads(self("inspect", name).stdout)[0]
        return data["NetworkSettings"]["Networks"][network][key]

    def address6(self, name):
        return self.address_on(name, self.net, "GlobalIPv6Address")

    def remove(self):
        for name in reversed(self.made):
            self.rm(name)
        if self.name == "docker":
            self("network", "rm", self.net, check=False)
        else:  # CNI's bridge plugin leaves its bridge when the last container goes
            (CNI_DIR / f"{self.net}.conflist").unlink(missing_ok=True)
            shutil.rmtree(f"/var/lib/cni/networks/{self.net}", ignore_errors=True)
            sh("ip", "link", "del", self.bridge, check=False)


@pytest.fixture
def ct_state(tmp_path, monkeypatch):
    """A state directory of the test's own, for every ratelimit it runs."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture(params=["podman", "docker"])
def engine(request, engines_up):
    e = Engine(request.param, engines_up)
    e.network()
    try:
        yield e
    finally:
        e.remove()


def web_and_client(e, timestamps=False, prefix="rlct-"):
    """PREFIXweb (nginx) and PREFIXclient on the engine's network; web's address."""
    web_name, client_name = f"{prefix}web", f"{prefix}client"
    # no TCP metrics kept between connections: each fetch starts as the first did
    web_cmd = WEB_CMD.replace("LISTEN6", "listen [::]:80; " if e.subnet6 else "")
    e.run(web_name, "--sysctl", "net.ipv4.tcp_no_metrics_save=1", e.image, "sh", "-c", web_cmd)
    # the link model's client: no TCP timestamps behind a header-compressing modem link
    e.run(client_name, "--sysctl", f"net.ipv4.tcp_timestamps={int(timestamps)}", e.image, "sleep", "600")
    web = e.address(web_name)
    for _ in range(50):  # nginx up
        if e("exec", client_name, "curl", "-s", "-o", "/dev/null", f"http://{web}/10000.bin",
             check=False).returncode == 0:
            return web
        time.sleep(0.1)
    raise AssertionError(f"nginx in {web_name} did not answer: {e('logs', web_name, check=False).stderr}")


def fetch(e, web, client="rlct-client"):
    """A timed download of web's 10,000-byte file by curl in the client container."""
    url = f"http://{web}/10000.bin"
    r = e("exec", client, *curl_argv(url, 120), check=False)
    d = read_curl(url, client, r)
    assert d is not None, f"{url} from {client}: {curl_failure(r)}"
    return d


def delay_args():
    """The profile whole where the kernel has netem, else without its delay (as the lab's --no-delay)."""
    return [] if probe(["netem"])["netem"] else ["--delay", "0ms"]


def model(applied):
    return LinkModel.from_summary(applied, delay_stage=probe(["netem"])["netem"])


def qdiscs(e, *names):
    """What a router inspection sees: every qdisc on the host and in the named containers."""
    out = [sh("tc", "qdisc", "show").stdout]
    out += [sh("nsenter", f"--net=/proc/{e.pid(n)}/ns/net", "tc", "qdisc", "show").stdout for n in names]
    return out


def gso_max_segs(e, name, dev="eth0"):
    """How many TCP segments container ``name``'s ``dev`` takes in one packet."""
    out = sh("nsenter", f"--net=/proc/{e.pid(name)}/ns/net", "ip", "-d", "-j", "link", "show", "dev", dev).stdout
    return json.loads(out)[0]["gso_max_segs"]


def single_segments(e, name, dev="eth0"):
    """What docs/containers.md ("Segments") tells a user whose server container serves a
    container on a user's link: its device sends single segments (``gso_max_segs 1``)."""
    sh("nsenter", f"--net=/proc/{e.pid(name)}/ns/net", "ip", "link", "set", "dev", dev, "gso_max_segs", "1")


def host_veth(e, name):
    """The host-side veth of container ``name`` on the engine's network."""
    from ratelimit.containers import lookup
    owner = lookup.resolve(name, e.name)[1]
    return lookup.wiring(owner, lookup.choose_network(owner, e.net)).veth


def run_dir():
    return sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
