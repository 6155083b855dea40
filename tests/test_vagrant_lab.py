"""The Vagrant lab booted for real (vagrant-libvirt): box, VMs, demo, monitoring, teardown.

Marked ``vagrant``; part of the README's test command (``python -m pytest -ra
tests``), deselect with ``-m "not vagrant"``.  One test, in stages, each
printed as it starts and ends (boots take minutes under software emulation):

  tools     root, vagrant with vagrant-libvirt, virsh, ssh
  libvirt   ``sh vagrant/libvirt.sh start``: libvirtd up (started here where no init
            system does it), KVM probed; nothing of a lab named ``rl-*`` exists yet
            (what a killed earlier run of this test left is removed first)
  box       ``bash vagrant/box/build.sh``: the box, from its cache when it is current
  up        ``vagrant up``: 1 router, 1 client, 1 server (the documented default)
  demo      ``vagrant/demo.py fetch --runs 3``: the 10,000-byte download through the
            router's modem link; the median of measured / model within 5%
  grow      RL_ROUTERS=2 RL_CLIENTS=2: router2 and client2 join, the server is
            provisioned again (routes, Prometheus targets)
  targets   Prometheus has both routers as targets with up == 1
  dialup    ``vagrant/demo.py dialup``: x = 100 httperf sessions over both routers for 40 s; the
            PromQL per-router rate is above zero for each router during the run
  destroy   ``vagrant destroy -f``; then no domain, network or volume of the lab is
            left in libvirt (the box stays in Vagrant's box directory and the build cache)

A stage that cannot run fails the test with the stage and the reason (the
command's last lines, the VMs' serial consoles); it never skips.  Whatever
happens, the lab is destroyed at the end, what is left of it is removed by its
``rl-*`` names, the box's upload into libvirt's pool is deleted if this test
made it, and libvirtd is stopped if this test started it.  The whole run is
bounded by ``RATELIMIT_VAGRANT_TIMEOUT`` seconds (default 2400).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vagrant

ROOT = Path(__file__).resolve().parent.parent
VAGRANT_DIR = ROOT / "vagrant"
URI = "qemu:///system"
PREFIX = "rl-"  # the Vagrantfile's default_prefix and network names
RUN_DIR = Path(os.environ.get("RL_RUN_DIR", "/run/ratelimit-vagrant"))
BOX_UPLOAD = "ratelimit-VAGRANTSLASH-bookworm64_vagrant_box_image_"
TIMEOUT_ENV = "RATELIMIT_VAGRANT_TIMEOUT"
# Written before the lab is booted, removed once it is cleaned up: a run killed in between
# (a reboot, SIGKILL) leaves it, and the next run removes that run's lab instead of refusing.
CLAIM = Path(os.environ.get("RATELIMIT_VAGRANT_CLAIM", "/var/tmp/ratelimit-vagrant-lab-test.json"))
TOLERANCE = 0.05
PASS_THROUGH = ("RL_LIBVIRT_DRIVER", "RL_BOX_CACHE", "RL_RUN_DIR", "RL_KVM_PROBE_TIMEOUT",
                "RL_DEBIAN_MIRROR", "RL_DEBIAN_SECURITY")


class StageFailed(Exception):
    pass


class Run:
    """Stages, progress lines, a deadline, and the commands of one lab run."""

    def __init__(self, capsys, tmp_path: Path):
        self.capsys = capsys
        self.tmp = tmp_path
        self.t0 = time.monotonic()
        self.deadline = self.t0 + float(os.environ.get(TIMEOUT_ENV, "2400"))
        self.stage = "setup"
        self.stage_wall = time.time()
        self.times: dict[str, float] = {}

    def say(self, line: str) -> None:
        with self.capsys.disabled():
            # stderr: an xdist worker's is the terminal's, so the stages show as they come
            print(f"vagrant lab [{time.monotonic() - self.t0:6.1f} s] {line}", file=sys.stderr, flush=True)

    def begin(self, stage: str, what: str) -> float:
        self.stage = stage
        self.stage_wall = time.time()
        self.say(f"{stage}: {what}")
        return time.monotonic()

    def end(self, started: float, note: str = "") -> None:
        took = time.monotonic() - started
        self.times[self.stage] = took
        self.say(f"{self.stage}: done in {took:.1f} s{': ' + note if note else ''}")

    def fail(self, reason: str):
        raise StageFailed(f"vagrant lab, stage {self.stage}: {reason}")

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RL_") or k in PASS_THROUGH}
        env.update(VAGRANT_DOTFILE_PATH=str(self.tmp / "dotfile"), VAGRANT_CWD=str(VAGRANT_DIR),
                   VAGRANT_CHECKPOINT_DISABLE="1", PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def run(self, argv, *, timeout: float, env=None, check=True, log: str | None = None):
        """Run ``argv`` (in vagrant/) with a timeout; its output, every line stamped with
        the seconds since the command started, goes to ``log`` in the test's directory
        (and is returned, unstamped).  Fails the stage on a non-zero exit if ``check``."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.fail(f"out of time ({TIMEOUT_ENV}={os.environ.get(TIMEOUT_ENV, '2400')} s) before {argv[0]}")
        limit = min(timeout, left)
        argv = [str(a) for a in argv]
        path = self.tmp / (log or f"cmd-{len(list(self.tmp.glob('cmd-*')))}.log")
        lines: list[str] = []
        started = time.monotonic()
        with open(path, "w") as out:
            out.write(f"$ {' '.join(argv)}\n")
            proc = subprocess.Popen(argv, env=env or self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", cwd=VAGRANT_DIR)

            def pump():
                for raw in proc.stdout:
                    # vagrant's progress bars: carriage returns and erase-line codes
                    for line in raw.replace("\x1b[K", "").split("\r"):
                        line = line.rstrip("\n")
                        if line and not line.startswith("Progress:"):
                            lines.append(line)
                            out.write(f"[{time.monotonic() - started:7.1f}] {line}\n")
                            out.flush()

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                reader.join(5)
                self.fail(f"{' '.join(argv)} did not finish in {limit:.0f} s (log {path}):\n"
                          + _last("\n".join(lines), 25))
            reader.join(30)
        text = "\n".join(lines)
        if check and code != 0:
            self.fail(f"{' '.join(argv)} failed (exit {code}; log {path}):\n" + _last(text, 25))
        return code, text


def _one_packet_per_frame(run, out: str) -> None:
    """offload.sh left no router device that merges received frames: their applies
    (the ``profile`` provisioner) did not warn of one."""
    warned = [line.strip() for line in out.splitlines() if "merged into bigger packets" in line]
    if warned:
        run.fail("a router still merges received frames after offload.sh:\n" + "\n".join(warned))


def _last(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _virsh(*args) -> list[str]:
    r = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=60)
    return [line.strip() for line in r.stdout.splitlines() if line.strip()] if r.returncode == 0 else []


def _inventory() -> dict[str, set[str]]:
    vols = set()
    if "default" in _virsh("pool-list", "--all", "--name"):
        vols = {line.split()[0] for line in _virsh("vol-list", "default")[2:]}
    return {"domains": set(_virsh("list", "--all", "--name")),
            "networks": set(_virsh("net-list", "--all", "--name")),
            "pools": set(_virsh("pool-list", "--all", "--name")),
            "volumes": vols}


def _lab_objects(inv) -> dict[str, list[str]]:
    return {"domains": sorted(d for d in inv["domains"] if d.startswith(PREFIX)),
            "networks": sorted(n for n in inv["networks"] if n.startswith(PREFIX)),
            "volumes": sorted(v for v in inv["volumes"] if v.startswith(PREFIX))}


def _serial_tails(names, since: float) -> str:
    """The last lines of the VMs' serial consoles, if written since ``since`` (the files
    are appended to across runs)."""
    out = []
    for name in names:
        path = Path(f"/var/log/libvirt/qemu/{PREFIX}{name}-serial.log")
        if path.exists() and path.stat().st_mtime >= since:
            out.append(f"--- serial console of {name} ({path}), last lines:\n"
                       + _last(path.read_text(errors="replace"), 6))
    return "\n".join(out)


def _remove_lab_objects(before) -> list[str]:
    """Remove what is left of the lab by name: only rl-* objects that were not there before."""
    removed = []
    now = _inventory()
    for d in sorted(now["domains"] - before["domains"]):
        if d.startswith(PREFIX):
            _virsh("destroy", d)
            _virsh("undefine", d, "--remove-all-storage")
            removed.append(f"domain {d}")
    for n in sorted(now["networks"] - before["networks"]):
        if n.startswith(PREFIX):
            _virsh("net-destroy", n)
            _virsh("net-undefine", n)
            removed.append(f"network {n}")
    for v in sorted(_inventory()["volumes"] - before["volumes"]):
        if v.startswith(PREFIX):
            _virsh("vol-delete", "--pool", "default", v)
            removed.append(f"volume {v}")
    return removed


def test_vagrant_lab_boots_demo_and_monitoring(tmp_path, capsys):
    run = Run(capsys, tmp_path)
    before = None
    started_libvirt = False
    failure = None
    up_env = run.env(RL_ROUTERS="1", RL_CLIENTS="1")
    grown_env = run.env(RL_ROUTERS="2", RL_CLIENTS="2")
    try:
        # ---------------------------------------------------------- tools
        t = run.begin("tools", "root, vagrant, vagrant-libvirt, virsh, ssh")
        if os.geteuid() != 0:
            run.fail("needs root (libvirt's qemu:///system, mmdebstrap); run the suite as root")
        missing = [c for c in ("vagrant", "virsh", "ssh", "curl") if shutil.which(c) is None]
        if missing:
            run.fail(f"not installed: {', '.join(missing)} (bash .ci/install installs them)")
        _, plugins = run.run(["vagrant", "plugin", "list"], timeout=120)
        if "vagrant-libvirt" not in plugins:
            run.fail("vagrant-libvirt is not installed (apt-get install vagrant-libvirt)")
        run.end(t)

        # ---------------------------------------------------------- libvirt
        t = run.begin("libvirt", "sh vagrant/libvirt.sh start (libvirtd, KVM probe)")
        had_started_file = (RUN_DIR / "started").exists()
        _, out = run.run(["sh", VAGRANT_DIR / "libvirt.sh", "start"], timeout=300)
        started_libvirt = not had_started_file and (RUN_DIR / "started").exists()
        before = _inventory()
        if CLAIM.exists():
            claimed = {k: set(v) for k, v in json.loads(CLAIM.read_text()).items()}
            removed = _remove_lab_objects(claimed)
            CLAIM.unlink()
            run.say(f"removed the lab a killed earlier run of this test left: {', '.join(removed) or 'nothing'}")
            before = _inventory()
        left = _lab_objects(before)
        if left["domains"] or left["networks"]:
            before = None  # not ours: never remove them
            run.fail(f"a Vagrant lab is up already (domains: {', '.join(left['domains']) or 'none'}; "
                     f"networks: {', '.join(left['networks']) or 'none'}): destroy it first "
                     f"(cd vagrant && vagrant destroy -f, with its RL_* variables)")
        CLAIM.write_text(json.dumps({k: sorted(v) for k, v in before.items()}))
        run.end(t, _last(out, 1))

        # ---------------------------------------------------------- box
        t = run.begin("box", "bash vagrant/box/build.sh (cold: a few minutes; cached: seconds)")
        _, out = run.run(["bash", VAGRANT_DIR / "box" / "build.sh"], timeout=1800, log="build.log")
        run.end(t, _last(out, 1))

        # ---------------------------------------------------------- up
        t = run.begin("up", "vagrant up: router1, client1, server")
        code, out = run.run(["vagrant", "up", "--provider=libvirt"], env=up_env, timeout=1500,
                            check=False, log="up.log")
        if code != 0:
            run.fail(f"vagrant up failed (exit {code}):\n{_last(out, 25)}\n"
                     + _serial_tails(["server", "router1", "client1"], run.stage_wall))
        _one_packet_per_frame(run, out)
        run.end(t)

        # ---------------------------------------------------------- demo
        t = run.begin("demo", "vagrant/demo.py fetch --runs 3 (client1 -> router1 -> server)")
        _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "fetch", "--runs", "3", "--json"],
                         env=up_env, timeout=600)
        demo = json.loads(out.strip().splitlines()[-1])
        ratios = [r["ratio"] for r in demo["runs"]]
        link = demo["runs"][0]["link"]
        measured = ", ".join(f"{r['measured_s']:.2f}" for r in demo["runs"])
        lookups = ", ".join(f"{r['lookup_s'] * 1000:.0f}" for r in demo["runs"])
        note = (f"measured (connect to last byte) {measured} s vs model "
                f"{link['model_s']:.2f} s ({link['profile']}, {link['mode']}); ratios "
                f"{', '.join(f'{x:.3f}' for x in ratios)} (the name's lookup before each: "
                f"{lookups} ms)")
        run.end(t, note)
        median = statistics.median(ratios)
        if not abs(median - 1) <= TOLERANCE:
            run.fail(f"the median of measured / model is {median:.3f}, not within {TOLERANCE:.0%}: {note}")

        # ---------------------------------------------------------- grow
        t = run.begin("grow", "RL_ROUTERS=2 RL_CLIENTS=2: vagrant up router2 client2; provision the server")
        code, out = run.run(["vagrant", "up", "--provider=libvirt", "router2", "client2"], env=grown_env,
                            timeout=1500, check=False, log="up2.log")
        if code != 0:
            run.fail(f"vagrant up router2 client2 failed (exit {code}):\n{_last(out, 25)}\n"
                     + _serial_tails(["router2", "client2"], run.stage_wall))
        _one_packet_per_frame(run, out)
        run.run(["vagrant", "provision", "server", "--provision-with", "hosts,server,prometheus"],
                env=grown_env, timeout=600, log="provision-server.log")
        run.end(t)

        # ---------------------------------------------------------- targets
        t = run.begin("targets", "Prometheus scrapes router1 and router2 (up == 1)")
        until = time.monotonic() + 120
        while True:
            _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "targets", "--json"], env=grown_env,
                             timeout=180)
            targets = json.loads(out.strip().splitlines()[-1])
            up = targets["up"]
            health = {t_["router"]: t_["health"] for t_ in targets["targets"]}
            # the targets' current health (a restarted Prometheus still has earlier `up` samples)
            if health == {"router1": "up", "router2": "up"} and up.get("router1") == 1 and up.get("router2") == 1:
                break
            if time.monotonic() > until:
                run.fail(f"Prometheus targets are not both up after 120 s: {targets['targets']}")
            time.sleep(5)
        run.end(t, ", ".join(f"{t_['router']} {t_['instance']} {t_['health']}" for t_ in targets["targets"]))

        # ---------------------------------------------------------- dialup
        t = run.begin("dialup", "x = 100 httperf sessions over both routers for 40 s; PromQL per router")
        _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "dialup", "--sessions", "100",
                          "--seconds", "40", "--json"], env=grown_env, timeout=300)
        dial = json.loads(out.strip().splitlines()[-1])
        prom = dial["prometheus"]
        note = "; ".join(f"{r}: {prom['bps'].get(r, {}).get('down', 0) / 1000:.0f} kbit/s down, "
                         f"{prom['active_links'].get(r, 0):.0f} active links, "
                         f"scrape {prom['scrape'].get(r, 0):.2f} s" for r in ("router1", "router2"))
        run.end(t, note)
        assert set(dial["behind"].values()) == {"router1", "router2"}, dial["behind"]
        for r in ("router1", "router2"):
            if not prom["bps"].get(r, {}).get("down", 0) > 0:
                run.fail(f"PromQL gave no down rate for {r} during the dial-up run: {prom} "
                         f"(query {dial['queries']['bps']})")

        # ---------------------------------------------------------- destroy
        t = run.begin("destroy", "vagrant destroy -f")
        run.run(["vagrant", "destroy", "-f"], env=grown_env, timeout=600, log="destroy.log")
        left = _lab_objects(_inventory())
        run.end(t)
        if any(left.values()):
            run.fail(f"vagrant destroy -f left {left}")
    except StageFailed as e:
        failure = str(e)
    finally:
        _cleanup(run, before, grown_env, started_libvirt)
    if failure:
        pytest.fail(failure, pytrace=False)
    run.say("stages: " + ", ".join(f"{k} {v:.0f} s" for k, v in run.times.items())
            + f"; total {time.monotonic() - run.t0:.0f} s")


def _cleanup(run: Run, before, env, started_libvirt: bool) -> None:
    """Leave no VM, network or volume of the lab behind, whatever happened."""
    if before is not None:
        if _lab_objects(_inventory())["domains"]:
            subprocess.run(["vagrant", "destroy", "-f"], env=env, cwd=VAGRANT_DIR, capture_output=True,
                           timeout=600)
        removed = _remove_lab_objects(before)
        if removed:
            run.say(f"cleanup: removed by name what vagrant destroy left: {', '.join(removed)}")
        # the box's upload into libvirt's pool, if this run made it (the box itself stays)
        for v in sorted(_inventory()["volumes"] - before["volumes"]):
            if v.startswith(BOX_UPLOAD):
                _virsh("vol-delete", "--pool", "default", v)
                run.say(f"cleanup: deleted the box's upload {v} from libvirt's pool default")
        if "default" not in before["pools"] and "default" in _inventory()["pools"] \
                and not _inventory()["volumes"]:
            _virsh("pool-destroy", "default")
            _virsh("pool-undefine", "default")
            run.say("cleanup: removed libvirt's pool default (vagrant-libvirt made it for this run)")
        CLAIM.unlink(missing_ok=True)
    if started_libvirt:
        subprocess.run(["sh", str(VAGRANT_DIR / "libvirt.sh"), "stop"], capture_output=True, timeout=60)
        run.say("cleanup: stopped libvirtd and virtlogd (this run started them)")
