"""``ratelimit lab``: for real, in namespaces, with traffic measured through the router.

Every test uses lab names of its own (``tl<pid>_<tag>``) and a private
``RATELIMIT_STATE_DIR``, so tests collide neither with each other nor with a
lab a person has up; ``leftovers(name)`` lists anything of a lab still on the
machine -- namespaces, /etc/netns entries, ratelimit state, files, processes --
and must be empty after ``lab down``.
"""

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import wait_until
from ratelimit.cli import subcommands
from ratelimit.errors import UsageError
from ratelimit.lab import docroot, measure, store, topology
from ratelimit.lab.cli import lab_main
from ratelimit.state import records

ROOT = Path(__file__).resolve().parent.parent


def lab_name(tag):
    return f"tl{os.getpid() % 100000}_{tag}"


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(d))
    return d


@pytest.fixture
def names(state_dir):
    """Factory of lab names; whatever is left of them is removed after the test."""
    made = []

    def make(tag):
        made.append(lab_name(tag))
        return made[-1]
    yield make
    for name in made:
        if os.geteuid() == 0:
            store.down(name)


def run_lab(*argv, timeout=120, **kw):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "ratelimit.lab", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def ok(*argv, **kw):
    r = run_lab(*argv, **kw)
    assert r.returncode == 0, f"lab {' '.join(argv)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def one_line_error(r, code, *needles):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ratelimit: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def leftovers(name):
    """Everything of lab ``name`` still on this machine."""
    prefix = topology.lab_prefix(name)
    found = [f"netns {n}" for n in topology.list_leftovers(prefix)]
    for base in (Path("/etc/netns"), records.state_dir()):
        if base.is_dir():
            found += [f"path {p}" for p in base.iterdir() if p.name.startswith(prefix)]
    if store.lab_path(name).exists():
        found.append(f"path {store.lab_path(name)}")
    marker = str(store.lab_path(name))
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(f"process {proc.name} {cmdline[:80]}")
    return found


def link_bytes(name, client="client1"):
    """Bytes the router's link to ``client`` carried downstream (since the last apply)."""
    data = json.loads(ok("status", "--name", name, "--json").stdout)
    return sum(t["bytes"] for t in data["totals"] if t["client"] == client and t["direction"] == "dest")


def model_of(name):
    """The applied link's model on this kernel (as the lab keeps it)."""
    from ratelimit.spec.linkmodel import LinkModel
    from ratelimit.kernel.probe import probe
    data = json.loads(ok("status", "--name", name, "--json").stdout)
    return LinkModel.from_summary(data["link"]["summary"], delay_stage=probe(["netem"])["netem"])


def curl(name, client, path):
    """(code, size, seconds, local port, the link model's seconds for exactly this download)."""
    r = ok("exec", "--name", name, client, "--", "curl", "-sS", "-o", "/dev/null", "-w",
           "%{http_code} %{size_download} %{time_total} %{local_port} %{size_header} %{size_request}",
           f"http://server{path}")
    code, size, seconds, port, header, request = r.stdout.split()
    d = measure.Download("", client, int(code), int(size), float(seconds), 0, 0, int(port), int(header), int(request))
    return d.http_code, d.bytes, d.seconds, d.local_port, d


# ---------------------------------------------------------------- pure


def test_the_model_counts_ipv6s_longer_header():
    """An IPv6 segment carries 20 bytes more header than IPv4's for the same MSS-limited
    payload: fewer payload bytes per full segment, so more bytes on the link."""
    import dataclasses
    from ratelimit.spec.linklayer import layer
    from ratelimit.spec.linkmodel import LinkModel
    v4 = LinkModel(layer("ethernet"), 1_000_000, 1_000_000)
    v6 = dataclasses.replace(v4, ipv6=True)
    assert (v4.mss_bytes, v6.mss_bytes) == (1448, 1428)
    assert v6.segments(2856) == [1500, 1500] and v4.segments(2856) == [1500, 1460]
    assert v6.response_frame_bytes(100_000) > v4.response_frame_bytes(100_000)
    assert v6.connect_seconds() > v4.connect_seconds()


def test_docroot_files_have_exact_sizes(tmp_path):
    paths = docroot.write(tmp_path / "www")
    sizes = {p.name: p.stat().st_size for p in paths}
    assert sizes["10000.bin"] == 10_000 == docroot.EXPERIMENT_BYTES
    for name, size in docroot.SIZES.items():
        assert sizes[name] == size
        assert (tmp_path / "www" / name).read_bytes() == docroot.content(size)
    before = {p: p.stat().st_mtime_ns for p in paths}
    docroot.write(tmp_path / "www")  # unchanged files are left alone
    assert before == {p: p.stat().st_mtime_ns for p in paths}


def test_builtin_server_serves_the_files_on_loopback(tmp_path):
    import threading
    import urllib.request
    docroot.write(tmp_path)
    server = docroot.make_server(tmp_path, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/10000.bin", timeout=10) as resp:
            body = resp.read()
            assert resp.headers["Content-Length"] == "10000"
        assert body == docroot.content(10_000)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("argv,needle", [
    (["up", "--clients", "x"], "--clients: 'x' is not a whole number"),
    (["up", "--clients", "254"], "--clients: 254 is more than the address plan holds (1-253"),
    (["up", "--ports", "80-1000"], "--ports: '80-1000' starts below 1024"),
    (["up", "--ports", "10000-10999,20000"], "is not one range LOW-HIGH"),
    (["up", "--name", "Bad-Name"], "lab name: Bad-Name is not 1-32 of a-z, 0-9, '_'"),
    (["up", "--mode", "fast"], "argument --mode: invalid choice: 'fast'"),
    (["up", "--burst", "many"], "--burst: 'many' is not a burst"),
    (["up", "--queue", "12xyz"], "--queue: '12xyz' is not a queue"),
    (["apply"], "lab apply: no PROFILE given"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_arguments_are_one_line_errors(argv, needle, state_dir):
    r = run_lab(*argv)
    one_line_error(r, 2, needle)
    assert not state_dir.exists() or not any(state_dir.rglob("*.json"))


@pytest.mark.parametrize("argv", [["--help"], ["up", "--help"], ["up", "--clients", "x"], ["frobnicate"]])
def test_ratelimit_lab_is_the_registered_subcommand(argv, state_dir):
    """``ratelimit lab`` runs the ``lab`` entry point (setup.py), not an import of the core
    command line: what it prints and its exit status are ``python -m ratelimit.lab``'s."""
    (registered,) = importlib.metadata.entry_points(group="ratelimit.subcommands", name="lab")
    assert registered.load() is lab_main
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    via = subprocess.run([sys.executable, "-m", "ratelimit", "lab", *argv], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    direct = run_lab(*argv)
    assert (via.returncode, via.stdout, via.stderr) == (direct.returncode, direct.stdout, direct.stderr)


@pytest.mark.parametrize("name,comes_with", [
    ("lab", "ratelimit's lab package, which ratelimit's setup.py registers"),
    ("web", "the webui package of ratelimit's checkout"),
])
def test_a_registered_subcommand_not_installed_says_what_it_comes_with(name, comes_with, monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])
    with pytest.raises(UsageError) as info:
        subcommands.run(name, ["--help"], None)
    assert str(info.value) == f"{name}: not installed (the '{name}' subcommand comes with {comes_with}: pip install -e .)"
    assert info.value.exit_code == 2


# ---------------------------------------------------------------- for real


@pytest.mark.netns
@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5% (loaded: 1.148)
def test_up_exec_apply_down_with_traffic(names):
    """A lab with two clients: the 100 kB file crosses the router at the rate applied, live."""
    name = names("traffic")
    r = ok("up", "--name", name, "--clients", "2", "--profile", "modem-28k8", "--mode", "shape",
           "--no-delay", "--rate", "400kbit", "--ports", "20000-20199")
    assert "198.18.0.2" in r.stdout and "198.19.0.2" in r.stdout
    assert topology.lab_namespaces(name) == sorted(f"{topology.lab_prefix(name)}{role}"
                                                 for role in ("c1", "c2", "router", "server"))

    # every client connection is an emulated link: ports come from the limited range
    rng = ok("exec", "--name", name, "client2", "--", "cat", "/proc/sys/net/ipv4/ip_local_port_range")
    assert rng.stdout.split() == ["20000", "20199"]

    # the router's client-facing device has the lab's QUEUES tx queues, and --queues auto a tree on each
    router = f"{topology.lab_prefix(name)}router"
    dev = json.loads(subprocess.run(["ip", "-n", router, "-d", "-j", "link", "show", "lan0"], check=True,
                                    capture_output=True, text=True).stdout)[0]
    assert dev["num_tx_queues"] == topology.QUEUES == min(8 * os.cpu_count(), 128)
    qdiscs = json.loads(subprocess.run(["tc", "-n", router, "-j", "qdisc", "show", "dev", "lan0"], check=True,
                                       capture_output=True, text=True).stdout)
    root = [q for q in qdiscs if q.get("root")]
    assert [q["kind"] for q in root] == ["mq"]
    trees = [q for q in qdiscs if q["kind"] == "htb" and q.get("parent", "").startswith(root[0]["handle"])]
    assert len(trees) == topology.QUEUES, qdiscs

    code, size, seconds, port, d = curl(name, "client1", "/100000.bin")
    assert (code, size) == (200, 100_000) and 20000 <= port <= 20199
    model = model_of(name)
    assert link_bytes(name) >= model.response_frame_bytes(100_000, header=d.header_bytes)  # the router counted it
    ratio = seconds / d.model_seconds(model)
    assert 0.95 < ratio < 1.05, (seconds, ratio)

    status = ok("status", "--name", name).stdout
    assert "modem-28k8" in status and "client2" in status and "198.18.0.3" in status

    # change the link live: 250 kbit/s
    ok("apply", "--name", name, "modem-28k8", "--mode", "shape", "--no-delay", "--rate", "250kbit")
    code, size, seconds2, _, d = curl(name, "client1", "/100000.bin")
    ratio = seconds2 / d.model_seconds(model_of(name))
    assert 0.95 < ratio < 1.05, (seconds2, ratio)
    assert seconds2 > 1.5 * seconds

    # clean: the lab stays, the link is unimpaired
    ok("clean", "--name", name)
    _, _, seconds3, _, _ = curl(name, "client1", "/100000.bin")
    assert seconds3 < seconds / 4

    r = ok("down", "--name", name)
    assert "removed 4 namespace(s)" in r.stdout
    assert leftovers(name) == []


@pytest.mark.netns
def test_killed_lab_up_is_removed_by_lab_down(names):
    """kill -9 in the middle of `lab up`, then `lab down`: nothing of the lab remains."""
    name = names("killed")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "ratelimit.lab", "up", "--name", name, "--clients", "3",
                             "--profile", "modem-28k8", "--mode", "shape", "--no-delay"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfile = store.lab_path(name) / "nginx" / "nginx.pid"
    builtin = store.lab_path(name) / "builtin" / "server.pid"
    wait_until(lambda: proc.poll() is not None or pidfile.exists() or builtin.exists(), 120,
               "lab up making its namespaces and starting its server", every_s=0.01)
    assert proc.poll() is None, "lab up ended before it could be killed mid-way"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert topology.lab_namespaces(name), "lab up was killed before it made anything"

    one_line_error(run_lab("status", "--name", name), 3, "is incomplete", f"lab down --name {name}")
    one_line_error(run_lab("up", "--name", name), 6, "left over by an interrupted `lab up`")

    ok("down", "--name", name)
    assert leftovers(name) == []


@pytest.mark.netns
def test_errors_leave_nothing_behind(names):
    name = names("errors")
    one_line_error(run_lab("up", "--name", name, "--profile", "modem-99k"), 2,
                       "--profile: 'modem-99k' is not a profile (known:")
    assert leftovers(name) == []
    one_line_error(run_lab("up", "--name", name, "--clients", "300"), 2, "--clients: 300")
    assert leftovers(name) == []
    one_line_error(run_lab("status", "--name", name), 3, f"lab '{name}' is not up")

    ok("up", "--name", name, "--server", "builtin")
    one_line_error(run_lab("up", "--name", name), 6, f"lab '{name}' is already up")
    one_line_error(run_lab("exec", "--name", name, "client2", "--", "true"), 3,
                   "HOST: 'client2' is not a host", "client1, router, server")
    # the lab that was up is untouched and serves the 10,000-byte file
    assert curl(name, "client1", "/10000.bin")[:2] == (200, 10_000)
    assert run_lab("exec", "--name", name, "server", "--", "sh", "-c", "exit 7").returncode == 7
    ok("down", "--name", name)
    assert leftovers(name) == []
    assert "nothing to remove" in ok("down", "--name", name).stdout


@pytest.mark.netns
def test_missing_netem_is_one_line_with_the_ways_out(names):
    from ratelimit.kernel.probe import probe
    if probe(["netem"])["netem"]:
        pytest.skip("this kernel has netem; the message is for kernels without it")
    name = names("netem")
    one_line_error(run_lab("up", "--name", name, "--profile", "modem-28k8"), 5,
                   "profile 'modem-28k8' needs delay/loss (module sch_netem)", "--no-delay", "--vm")
    assert leftovers(name) == []
    # a schedule whose steps delay (train's cable and 3G steps): --no-delay leaves them, so it is no way out
    for extra, ways in (((), "add --no-delay and a schedule whose steps set no delay or loss"),
                        (("--no-delay",), "add a schedule whose steps set no delay or loss")):
        one_line_error(run_lab("up", "--name", name, "--schedule", "train", "--rate", "1mbit", *extra), 5,
                       "needs delay/loss (module sch_netem)", ways, "the schedule's steps delay or lose packets",
                       "--vm")
        assert leftovers(name) == []


@pytest.mark.netns
def test_up_with_command_runs_it_and_goes_down(names):
    name = names("cmd")
    r = ok("up", "--name", name, "--", "sh", "-c", 'echo "lab=$RL_LAB server=$RL_LAB_SERVER"')
    assert f"lab={name} server=198.19.0.2" in r.stdout
    assert leftovers(name) == []


def server_tcp_in_kernel(netns):
    """(rto_min ms or None, initcwnd or None) of the namespace's IPv4 and IPv6 default routes, as
    ``ip -j`` shows them, and its congestion control (``sysctl -n``)."""
    metrics = []
    for family in ("-4", "-6"):
        routes = json.loads(subprocess.run(["ip", "-n", netns, family, "-j", "route", "show", "default"],
                                           capture_output=True, text=True, check=True).stdout)
        assert len(routes) == 1, routes
        shown = {k: v for m in routes[0].get("metrics", []) for k, v in m.items()}
        metrics.append((shown.get("rto_min"), shown.get("initcwnd")))
    cc = subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-n", "net.ipv4.tcp_congestion_control"],
                        capture_output=True, text=True, check=True).stdout.strip()
    return metrics, cc


HOST_CC = Path("/proc/sys/net/ipv4/tcp_congestion_control")


@pytest.mark.netns
@pytest.mark.parametrize("start,rto_min_ms,initcwnd,cc,text", [
    # Linux's own: the routes carry no metric, the namespace keeps the host's congestion control
    ("linux", None, None, None, "linux (RTO floor 200 ms, initial window 10, "),
    ("rfc6298", 1000, None, None, "rfc6298 (RTO floor 1 s, initial window 10, "),
    ("2000", 1000, 2, "reno", "2000 (RTO floor 1 s, initial window 2, reno)"),
])
def test_server_tcp_start(names, start, rto_min_ms, initcwnd, cc, text):
    """--server-tcp: what the kernel shows in the server namespace, and what the lab reports."""
    name = names(f"tcp{start}")
    cc = cc or HOST_CC.read_text().strip()
    r = ok("up", "--name", name, "--server", "none", "--server-tcp", start)
    assert f"server TCP: {text}" in r.stdout and f", {cc})" in r.stdout, r.stdout
    server = f"{topology.lab_prefix(name)}server"
    assert server_tcp_in_kernel(server) == ([(rto_min_ms, initcwnd)] * 2, cc)
    data = json.loads(ok("status", "--name", name, "--json").stdout)
    assert data["server"]["tcp"] == {"name": start, "rto_min_ms": rto_min_ms or 200,
                                     "initcwnd_segments": initcwnd or 10, "congestion_control": cc}
    assert f"server TCP: {text}" in ok("status", "--name", name).stdout
    ok("down", "--name", name)
    assert leftovers(name) == []


@pytest.mark.netns
def test_bad_server_tcp_is_one_line_and_leaves_nothing(names):
    name = names("tcpbad")
    for argv in (["up", "--name", name, "--server", "none"], ["demo", "--name", name]):
        one_line_error(run_lab(*argv, "--server-tcp", "1999"), 2,
                       "--server-tcp: '1999' is not one of linux, rfc6298, 2000")
        assert leftovers(name) == []


def _forbidden_congestion_control():
    """A congestion control this kernel has that namespaces may not use, or None."""
    sysctl = Path("/proc/sys/net/ipv4")
    allowed = (sysctl / "tcp_allowed_congestion_control").read_text().split()
    available = (sysctl / "tcp_available_congestion_control").read_text().split()
    return next((cc for cc in available if cc not in allowed), None)


@pytest.mark.netns
def test_server_tcp_fails_loudly_on_a_forbidden_congestion_control(names, monkeypatch):
    """A start whose congestion control namespaces may not use: lab up fails with how to allow
    it, and removes the lab, instead of running the namespace's own."""
    from ratelimit.errors import KernelMissing
    from ratelimit.lab import servertcp
    from ratelimit.lab.core import Lab
    cc = _forbidden_congestion_control()
    if cc is None:
        pytest.skip("every congestion control of this kernel is allowed in namespaces")
    monkeypatch.setitem(servertcp.STARTS, "rfc6298", servertcp.Start("rfc6298", 1000, 10, cc))
    name = names("tcpforbidden")
    with pytest.raises(KernelMissing) as err:
        Lab.up(name, server="none", server_tcp="rfc6298")
    assert str(err.value).startswith(f"--server-tcp rfc6298: congestion control {cc} is not allowed")
    assert "sysctl -w net.ipv4.tcp_allowed_congestion_control=" in str(err.value)
    assert "\n" not in str(err.value)
    assert leftovers(name) == []


def assert_demo_output(out, *, delay_stage):
    """The demo's numbers: measured within 5% of the link model; the model within 5% of
    what the cited real modems moved for the same bytes; on a full kernel, a handshake
    of at least the modem's two 50 ms delays."""
    def seconds(label):
        return float(out.split(f"\n  {label}")[1].split()[0])
    measured, model = seconds("measured"), seconds("the model")
    assert 0.95 < measured / model < 1.05, out
    real = out.split("\n  real modem")[1].split("\n")[0]
    assert abs(float(real.split("(")[-1].split("%")[0])) < 5, out  # "... in 2.99 s (-4.2%)"
    assert seconds("theory") == pytest.approx(10_000 * 8 / 28_800, abs=0.01)
    handshake_ms = float(out.split("TCP handshake")[1].split()[0])
    if delay_stage:
        assert handshake_ms >= 100 and "lacks netem" not in out, out
    else:
        assert "lacks netem" in out and seconds("whole link") > model, out


@pytest.mark.netns
@pytest.mark.alone_on_host  # the demo times its download against the link model, within 5%
def test_demo_on_this_kernel(state_dir):
    """The newcomer's first command, wherever it runs (here: the host kernel)."""
    from ratelimit.kernel.probe import probe
    r = ok("demo", "--name", lab_name("hdemo"), timeout=300)
    assert_demo_output(r.stdout, delay_stage=probe(["netem"])["netem"])
    assert leftovers(lab_name("hdemo")) == []


@pytest.mark.kernel("netem")
def test_demo_with_the_modem_delay(state_dir):
    """The newcomer's first command on a full kernel: the 28.8k modem with its 50 ms delays."""
    r = ok("demo", "--name", lab_name("demo"), timeout=900)
    out = r.stdout
    assert_demo_output(out, delay_stage=True)
    assert leftovers(lab_name("demo")) == []
