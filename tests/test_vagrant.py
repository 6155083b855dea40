"""The Vagrant lab: the Vagrantfile validates, wires what MISSION.md describes, and
its provisioning scripts really work -- run here in namespaces wired like the VMs.

``vagrant validate`` must be installed (CI: apt-get install vagrant vagrant-libvirt);
its absence is a failure, not a skip.  The wiring is read by loading the real
Vagrantfile under a recording stand-in for Vagrant's configuration object (Ruby
comes with Vagrant), and the namespace test then builds exactly those networks
and runs exactly those provisioners with exactly that environment, changing only
what must differ on this host (no apt-get, the checkout's path, a temporary lab
directory, shape mode without netem when the kernel lacks police and netem).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ratelimit.spec import fleet
from ratelimit.spec.summary import summary

ROOT = Path(__file__).resolve().parent.parent
VAGRANT_DIR = ROOT / "vagrant"
PROVISION = VAGRANT_DIR / "provision"

# A recording stand-in for the part of Vagrant's configuration API the
# Vagrantfile uses; it prints what was configured as JSON.
RECORDER = r'''
require "json"
$out = { "global" => {}, "machines" => {} }
class RLAny
  def method_missing(*_args, **_kw)
    self
  end

  def respond_to_missing?(*)
    true
  end
end
class RLVM
  def initialize(data)
    @d = data
  end

  def box=(v)
    @d["box"] = v
  end

  def hostname=(v)
    @d["hostname"] = v
  end

  def post_up_message=(v)
    @d["post_up_message"] = v
  end

  def synced_folder(src, dst, **o)
    (@d["synced"] ||= []) << { "src" => src, "dst" => dst }.merge(o)
  end

  def provider(name)
    (@d["providers"] ||= []) << name.to_s
    yield RLAny.new, RLAny.new  # the provider's configuration, and the override (config.vm)
  end

  def network(kind, **o)
    (@d["networks"] ||= []) << { "kind" => kind }.merge(o)
  end

  def provision(name, **o)
    (@d["provision"] ||= []) << { "name" => name }.merge(o)
  end

  def define(name)
    m = $out["machines"][name] = {}
    yield Struct.new(:vm).new(RLVM.new(m))
  end
end
module Vagrant
  def self.configure(_version)
    yield Struct.new(:vm).new(RLVM.new($out["global"]))
  end
end
load ARGV[0]
puts JSON.generate($out)
'''


def _vagrant_env(tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("RL_")}
    full.update(VAGRANT_DOTFILE_PATH=str(tmp_path / "dotfile"), VAGRANT_CHECKPOINT_DISABLE="1",
                VAGRANT_CWD=str(VAGRANT_DIR))
    full.update(env)
    return full


def _validate(tmp_path, **env):
    vagrant = shutil.which("vagrant")
    assert vagrant, "vagrant is not installed (apt-get install vagrant vagrant-libvirt)"
    return subprocess.run([vagrant, "validate"], cwd=VAGRANT_DIR, env=_vagrant_env(tmp_path, **env),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("routers,clients", [(1, 1), (4, 4)])
def test_vagrant_validate(tmp_path, routers, clients):
    r = _validate(tmp_path, RL_ROUTERS=str(routers), RL_CLIENTS=str(clients))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "validated successfully" in r.stdout
    assert not (VAGRANT_DIR / ".vagrant").exists()  # VAGRANT_DOTFILE_PATH kept it in tmp_path


@pytest.mark.parametrize("name,value,allowed", [
    ("RL_CLIENTS", "0", "is not a whole number from 1 to 200"),
    ("RL_ROUTERS", "many", "is not a whole number from 1 to 16"),
    ("RL_PROFILE", "modem-99k", "is not a profile (known: 3g,"),
    ("RL_MODE", "fast", "is not one of police, shape"),
    ("RL_PORTS", "100-99999", "is not a port range LOW-HIGH within 1024-65535"),
])
def test_vagrant_bad_environment_is_one_line(tmp_path, name, value, allowed):
    r = _validate(tmp_path, **{name: value})
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"Vagrantfile: {name}: '{value}' {allowed}"), r.stderr


def _config(tmp_path, **env):
    ruby = shutil.which("ruby")
    assert ruby, "ruby is missing (it comes with vagrant: apt-get install vagrant)"
    script = tmp_path / "record.rb"
    script.write_text(RECORDER)
    r = subprocess.run([ruby, str(script), str(VAGRANT_DIR / "Vagrantfile")], env=_vagrant_env(tmp_path, **env),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _provisioners(machine):
    return {p["name"]: p for p in machine.get("provision", [])}


@pytest.mark.parametrize("routers,clients", [(1, 1), (4, 4), (2, 5), (3, 1)])
def test_vagrant_wiring(tmp_path, routers, clients):
    """Client i -> router ((i-1) mod R)+1 -> the server, on lab addresses, with matching routes."""
    cfg = _config(tmp_path, RL_ROUTERS=str(routers), RL_CLIENTS=str(clients))
    machines = cfg["machines"]
    assert sorted(machines) == sorted(["server"] + [f"router{r}" for r in range(1, routers + 1)]
                                      + [f"client{c}" for c in range(1, clients + 1)])
    assert cfg["global"]["box"] == "ratelimit/bookworm64"  # vagrant/box/build.sh
    assert sorted(cfg["global"]["providers"]) == ["libvirt", "virtualbox"]
    assert cfg["global"]["synced"][-1]["dst"] == "/vagrant"

    def nets(name):
        return {n["virtualbox__intnet"]: n["ip"] for n in machines[name]["networks"]}

    for n in (n for m in machines.values() for n in m["networks"]):
        assert n["kind"] == "private_network"
        assert n["virtualbox__intnet"] == n["libvirt__network_name"]
        assert n["ip"].startswith(("198.18.", "198.19.")) and not n["ip"].endswith(".1")
    addresses = [ip for name in machines for ip in nets(name).values()]
    assert len(addresses) == len(set(addresses))

    server_ip = nets("server")["rl-servers"]
    server_routes = _provisioners(machines["server"])["server"]["env"]["RL_ROUTES"].split(";")
    assert len(server_routes) == routers
    for c in range(1, clients + 1):
        r = (c - 1) % routers + 1
        (net, ip), = nets(f"client{c}").items()
        assert net == f"rl-clients-{r}"
        router_ip = nets(f"router{r}")[net]
        assert ip.rsplit(".", 1)[0] == router_ip.rsplit(".", 1)[0]
        env = _provisioners(machines[f"client{c}"])["client"]["env"]
        assert env["RL_ROUTES"] == f"{server_ip.rsplit('.', 1)[0]}.0/24 via {router_ip}"
        assert env["RL_PORTS"] == "10000-10999"
        profile = _provisioners(machines[f"router{r}"])["profile"]["env"]
        assert ip in profile["RL_CLIENT_HOSTS"].split(",")
        assert profile["RL_CLIENT_ADDR"] == router_ip
        assert profile["RL_PORTS"] == env["RL_PORTS"] and profile["RL_PROFILE"] == "modem-28k8"
        assert f"{ip.rsplit('.', 1)[0]}.0/24 via {nets(f'router{r}')['rl-servers']}" in server_routes
    for r in range(1, routers + 1):
        prov = _provisioners(machines[f"router{r}"])
        assert prov["install"]["env"]["RL_APPLY"] == "0"
        assert prov["profile"]["run"] == "always"
        # the monitoring: read-only, on the server network, naming the scraper
        router_ip = nets(f"router{r}")["rl-servers"]
        assert prov["web"]["env"] == {"RL_LISTEN": f"{router_ip}:8080", "RL_ALLOW_HOSTS": server_ip,
                                      "RL_CLIENT_ADDR": nets(f"router{r}")[f"rl-clients-{r}"]}
        assert sorted(prov["offload"]["env"]["RL_ADDRS"].split(",")) == sorted(nets(f"router{r}").values())
    prom = _provisioners(machines["server"])["prometheus"]["env"]
    assert prom["RL_LISTEN"] == f"{server_ip}:9090"
    # the targets come from the lab's inventory of routers: each one's client network, behind eth1
    # (its first lab network), and its web's /metrics
    hosts = json.loads(prom["RL_INVENTORY"])["routers"]["hosts"]
    lab = fleet.routers_of({name: h["ratelimit"] for name, h in hosts.items()})
    assert [(r.name, r.interface, [str(c) for c in r.clients]) for r in lab] == [
        (f"router{r}", "eth1", [nets(f"router{r}")[f"rl-clients-{r}"].rsplit(".", 1)[0] + ".0/24"])
        for r in range(1, routers + 1)]
    assert all(machines[f"router{r}"]["networks"][0]["libvirt__network_name"] == f"rl-clients-{r}"
               for r in range(1, routers + 1))  # eth0 is the management network, eth1 the first of these
    assert fleet.scrape_targets(lab) == [{"targets": [f"{nets(f'router{r}')['rl-servers']}:8080"],
                                          "labels": {"router": f"router{r}"}} for r in range(1, routers + 1)]


# ---------------------------------------------------------------- the scripts, for real


def _sh(*argv, check=True, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))}: {r.stderr.strip()}")
    return r


def _remove_namespaces(prefix):
    names = [line.split()[0] for line in _sh("ip", "netns", "list").stdout.splitlines() if line.strip()]
    for ns in (n for n in names if n.startswith(prefix)):
        for pid in _sh("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        _sh("ip", "netns", "delete", ns, check=False)


class VagrantInNamespaces:
    """The Vagrantfile's machines as namespaces ``PREFIX<machine>``; each
    private network is a bridge in the namespace ``PREFIXsw``.

    Every veth has ``gso_max_segs 1``, the namespace form of what ``offload.sh``
    does on the VMs' NICs: the routers see one packet per frame.  With the veths'
    default the server's TCP hands them super-packets of several segments, which
    HTB charges one framing overhead and lets through whenever its bucket is
    above zero: the 100,000-byte download read 0.966 of the model in 15 of 15
    runs on this host (1.015 with the setting), and 0.922 once under CI's load."""

    def __init__(self, prefix, machines):
        self.prefix = prefix
        self.machines = machines
        self.switch = prefix + "sw"

    def ns(self, machine):
        return self.prefix + machine

    def build(self):
        _sh("ip", "netns", "add", self.switch)
        bridges = {}
        for m_index, (name, m) in enumerate(sorted(self.machines.items())):
            _sh("ip", "netns", "add", self.ns(name))
            _sh("ip", "-n", self.ns(name), "link", "set", "lo", "up")
            for i, net in enumerate(m["networks"], start=1):
                bridge = bridges.setdefault(net["virtualbox__intnet"], f"br{len(bridges)}")
                if _sh("ip", "-n", self.switch, "link", "show", bridge, check=False).returncode:
                    _sh("ip", "-n", self.switch, "link", "add", bridge, "type", "bridge")
                    _sh("ip", "-n", self.switch, "link", "set", bridge, "up")
                port = f"p{m_index}x{i}"
                _sh("ip", "-n", self.ns(name), "link", "add", f"eth{i}", "gso_max_segs", "1", "type", "veth",
                    "peer", "name", port, "gso_max_segs", "1", "netns", self.switch)
                _sh("ip", "-n", self.switch, "link", "set", port, "master", bridge, "up")
                _sh("ip", "-n", self.ns(name), "addr", "add", f"{net['ip']}/24", "dev", f"eth{i}")
                _sh("ip", "-n", self.ns(name), "link", "set", f"eth{i}", "up")

    def provision(self, machine, name, **overrides):
        """Run ``machine``'s provisioner ``name`` in its namespace, as Vagrant would."""
        prov = _provisioners(self.machines[machine])[name]
        env = {"PATH": os.environ["PATH"], **prov.get("env", {}), **overrides}
        if "path" in prov:
            argv = ["sh", prov["path"]]
        else:
            argv = ["sh", "-c", prov["inline"]]
        return _sh("ip", "netns", "exec", self.ns(machine), "env", "-i",
                   *(f"{k}={v}" for k, v in env.items()), *argv)


def _host_overrides(tmp_path):
    """What differs on this host from a VM: no apt-get, the checkout's path, a lab dir."""
    return {"RL_INSTALL": "0", "RL_SRC": str(ROOT), "RL_PYTHON": sys.executable,
            "RATELIMIT_STATE_DIR": str(tmp_path / "state"), "PYTHONDONTWRITEBYTECODE": "1"}


def _router_overrides():
    """netem is a module every stock kernel has, but not this sandbox's kernel."""
    from ratelimit.kernel.probe import probe
    if probe(["netem"])["netem"]:
        return {"RL_ARGS": "--rate 400kbit"}
    return {"RL_ARGS": "--rate 400kbit --delay 0ms"}


def _router_model():
    """The link model of what ``_router_overrides`` makes router.sh apply (shape, per port)."""
    from ratelimit import service
    from ratelimit.kernel.probe import probe
    from ratelimit.spec.linkmodel import LinkModel
    netem = probe(["netem"])["netem"]
    req = service.make_request("eth1", hosts="198.18.1.11", ports="10000-10199", profile="modem-28k8",
                               rate="400kbit", **({} if netem else {"delay": "0ms"}))
    return LinkModel.from_summary(summary(req), delay_stage=netem)


@pytest.mark.netns
@pytest.mark.alone_on_host  # its download is timed against the model from userspace; loaded, it read 1.147 of it
def test_provision_scripts_in_namespaces(tmp_path):
    """server.sh, router.sh and client.sh, with the Vagrantfile's own environment,
    make a lab in which a client's download crosses its router at the profile's rate."""
    prefix = f"rlvg{os.getpid() % 10000}-"
    # RL_PORTS narrower than the default: shape mode builds one HTB class per (client, port)
    cfg = _config(tmp_path, RL_ROUTERS="2", RL_CLIENTS="3", RL_PORTS="10000-10199")
    lab = VagrantInNamespaces(prefix, cfg["machines"])
    base = _host_overrides(tmp_path)
    try:
        lab.build()
        out = lab.provision("server", "server", **base, RL_LAB_DIR=str(tmp_path / "srv"),
                            RL_NGINX_USER="root").stdout
        assert "serving" in out
        for r in (1, 2):
            lab.provision(f"router{r}", "install", **base)
            out = lab.provision(f"router{r}", "profile", **base, **_router_overrides()).stdout
            assert "router: modem-28k8" in out
        for c in (1, 2, 3):
            lab.provision(f"client{c}", "client", **base, RL_PERSIST="0")
            rng = _sh("ip", "netns", "exec", lab.ns(f"client{c}"), "cat",
                      "/proc/sys/net/ipv4/ip_local_port_range").stdout.split()
            assert rng == ["10000", "10199"]

        # client3 sits behind router1 with client1 (2 routers, 3 clients)
        t0 = time.monotonic()
        r = _sh("ip", "netns", "exec", lab.ns("client3"), "curl", "-sS", "-o", "/dev/null", "-w",
                "%{size_download} %{time_total} %{local_port} %{size_header} %{size_request}",
                "http://198.19.0.2/100000.bin")
        size, seconds, port, header, request = r.stdout.split()
        assert int(size) == 100_000 and 10000 <= int(port) <= 10199
        # the profile's PPP framing at 400 kbit/s, handshake and request included
        expected = _router_model().fetch_seconds(100_000, header=int(header), request=int(request))
        assert 0.95 < float(seconds) / expected < 1.05, (seconds, expected, time.monotonic() - t0)
        # a connection from outside the port range is not limited
        r = _sh("ip", "netns", "exec", lab.ns("client1"), "curl", "-sS", "-o", "/dev/null",
                "--local-port", "20000-20100", "-w", "%{time_total}", "http://198.19.0.2/100000.bin")
        assert float(r.stdout) < expected / 4
    finally:
        _remove_namespaces(prefix)
    names = _sh("ip", "netns", "list").stdout
    assert prefix not in names


def test_provision_scripts_reject_bad_values(tmp_path):
    for script, env, message in (
        ("client.sh", {"RL_PORTS": "10999-10000"}, "RL_PORTS: '10999-10000' is not a range within 1024-65535"),
        ("client.sh", {"RL_PORTS": "abc"}, "RL_PORTS: 'abc' is not a port range"),
        ("server.sh", {"RL_SERVER": "apache"}, "RL_SERVER: 'apache' is not a server (nginx, builtin, auto)"),
        ("server.sh", {"RL_PORT": "99999"}, "RL_PORT: '99999' is not a port (1-65535)"),
        ("router.sh", {"RL_MODE": "fast"}, "RL_MODE: 'fast' is not a mode (police, shape)"),
        ("web.sh", {"RL_LISTEN": "router1:8080"}, "RL_LISTEN: 'router1:8080' is not IPV4:PORT"),
        ("web.sh", {"RL_LISTEN": "198.19.0.11:80800"}, "RL_LISTEN: '198.19.0.11:80800' has no valid port"),
        ("web.sh", {"RL_LISTEN": "198.19.0.11:8080", "RL_CLIENT_ADDR": "198.18.1.2",
                    "RL_ALLOW_HOSTS": "a b;c"}, "RL_ALLOW_HOSTS: 'a b;c' is not a comma-separated list"),
        ("prometheus.sh", {"RL_TARGETS": "router1=198.19.0.11"}, "RL_TARGETS: 'router1=198.19.0.11' is not NAME=IPV4:PORT"),
        ("prometheus.sh", {"RL_INVENTORY": '{"routers": {"hosts": {"r1": {"ratelimit": {"interface": "eth1", '
                                           '"clients": ["198.18.1.0/24"]}}}}}', "RL_SRC": str(ROOT)},
         "RL_INVENTORY: inventory r1: no metrics (give the HOST:PORT"),
        ("prometheus.sh", {"RL_INVENTORY": '{"routers": {"hosts": {"r1": {"ratelimit": {"interface": "eth1", '
                                           '"clients": ["198.18.1.0/24"], "metrics": "x;reboot:80"}}}}}',
                           "RL_SRC": str(ROOT)},
         "RL_INVENTORY: inventory r1: metrics: x;reboot:80 is not HOST:PORT"),
        ("prometheus.sh", {"RL_INVENTORY": '[1]', "RL_SRC": str(ROOT)},
         "RL_INVENTORY: is not an inventory with a group routers"),
        ("prometheus.sh", {"RL_TARGETS": "Router 1=x"}, "RL_TARGETS: 'Router' is not NAME=IPV4:PORT"),
        ("prometheus.sh", {"RL_TARGETS": "r1=198.19.0.11:8080", "RL_SCRAPE_INTERVAL": "0"},
         "RL_SCRAPE_INTERVAL: '0' is not a whole number of seconds (1-60)"),
        ("prometheus.sh", {"RL_TARGETS": "r1=198.19.0.11:8080", "RL_LISTEN": "0.0.0.0"},
         "RL_LISTEN: '0.0.0.0' is not IPV4:PORT"),
        ("offload.sh", {"RL_ADDRS": "198.18.1.2;reboot"}, "RL_ADDRS: '198.18.1.2;reboot' is not a comma-separated list"),
        ("offload.sh", {"RL_ADDRS": "198.51.100.77"}, "RL_ADDRS: '198.51.100.77' is not an address of this machine"),
        ("../libvirt.sh", {}, "'' is not a command (start, stop, status, accel [--fresh])"),
        ("../libvirt.sh", {"RL_KVM_PROBE_TIMEOUT": "9999"}, "RL_KVM_PROBE_TIMEOUT: '9999' is not a whole number"),
        ("../box/build.sh", {"RL_BOX_NAME": "../evil"}, "RL_BOX_NAME: '../evil' is not a box name"),
        ("../box/build.sh", {"RL_BOX_CACHE": "cache"}, "RL_BOX_CACHE: 'cache' is not an absolute path"),
    ):
        shell = "bash" if script.endswith("build.sh") else "sh"
        r = subprocess.run([shell, str(PROVISION / script)], env={"PATH": os.environ["PATH"], "RL_INSTALL": "0", **env},
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (script, r.stderr)
        assert r.stderr.strip().splitlines() == [r.stderr.strip()]
        assert message in r.stderr, r.stderr


@pytest.mark.netns
def test_offload_script_leaves_no_device_that_merges_frames():
    """offload.sh turns GRO off on the lab interface it is given and on every other one
    that is up (the management interface), so ratelimit's apply finds nothing to warn about."""
    from ratelimit.kernel.readback import Reader
    ns = f"rlvo{os.getpid() % 10000}"
    peers = ns + "p"
    _sh("ip", "netns", "add", ns)
    _sh("ip", "netns", "add", peers)
    try:
        for dev, peer, addr in (("eth0", "mgmt", "198.18.9.2/24"), ("eth1", "lab", "198.18.1.2/24")):
            _sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer, "netns", peers)
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", peers, "link", "set", peer, "up")
            _sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "on")
        with Reader(ns) as reader:
            assert sorted(reader.merging()) == [("eth0", ("rx-gro",)), ("eth1", ("rx-gro",))]
            out = _sh("ip", "netns", "exec", ns, "env", "-i", f"PATH={os.environ['PATH']}",
                      "RL_ADDRS=198.18.1.2", "sh", str(PROVISION / "offload.sh")).stdout
            assert out.strip() == "offload: gro, rx-gro-hw, lro, gso and tso off on eth1 eth0"
            assert reader.merging() == []
    finally:
        _remove_namespaces(ns)


def test_box_and_router_hash_the_same_sources():
    """router.sh skips reinstalling ratelimit when the synced checkout has the sources the
    box was built from: both scripts must hash them the same way."""
    def body(path):
        text = path.read_text()
        start = text.index("src_hash() {")
        return text[start:text.index("\n}\n", start)]
    assert body(PROVISION / "router.sh") == body(VAGRANT_DIR / "box" / "customize.sh")


def test_box_hook_leaves_mmdebstrap_its_apt_configuration():
    """mmdebstrap keeps its APT_CONFIG file in the new system's /tmp until its cleanup runs
    `apt-get update` with no sources; a hook that empties that /tmp makes the update run on
    the host's own package lists and empty them (it did: the suite left /var/lib/apt/lists
    empty after every cold box build)."""
    text = (VAGRANT_DIR / "box" / "customize.sh").read_text()
    commands = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    removed = [word for line in commands.splitlines() if re.match(r"\s*rm\b", line) for word in line.split()[1:]]
    assert removed and not [w for w in removed if re.fullmatch(r'"?\$R"?/tmp(/\*|/?)"?', w)], removed


def test_demo_rejects_bad_options():
    for args, message in ((["--runs", "0"], "--runs: 0 is out of range (1-20)"),
                          (["dialup", "--seconds", "5"], "--seconds: 5 is out of range (35-600"),
                          (["nonsense"], "invalid choice: 'nonsense'")):
        r = subprocess.run([sys.executable, str(VAGRANT_DIR / "demo.py"), *args], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and message in r.stderr, r.stderr


def test_linkmodel_gives_the_model_of_an_applied_link():
    """vagrant/linkmodel.py (run in a router VM by demo.py): the model of the link a
    request describes, from connect to last byte.  Pure: no VM."""
    import importlib.util
    from ratelimit import service
    spec = importlib.util.spec_from_file_location("linkmodel", VAGRANT_DIR / "linkmodel.py")
    linkmodel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(linkmodel)
    req = service.make_request("eth1", hosts=["198.18.1.11"], ports="10000-10999", profile="modem-28k8",
                               mode="shape", burst=1)
    m = linkmodel.link_model(10_000, req, req.only, header=240, request=80)
    from ratelimit.spec.linkmodel import LinkModel
    model = LinkModel.from_summary(summary(req))
    assert m["model_s"] == model.fetch_seconds(10_000, header=240, request=80)
    # 10,000 bytes at 28.8 kbit/s: 2.78 s in theory; PPP frames at 93% of the line, the
    # handshake, the request and the modem's 50 ms each way make it 3.3 s
    assert 3.2 < m["model_s"] < 3.4, m
    assert m["link_layer"] == "ppp-vj" and m["wire_bytes"] == model.response_frame_bytes(10_000, header=240)
    assert m["burst_bytes"] == 3358  # v0.3's --burst 1: a second at the carried rate
