"""The machinery of the Vagrant lab's test (tests/test_vagrant_lab.py): its stages, each
printed as it starts and ends (``Run``), its commands with logs and a deadline, and what it
reads and removes of libvirt's objects (domains, networks, volumes named ``rl-*``).

>>> last_lines("a\\nb\\nc", 2)
'b\\nc'
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

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
                          + last_lines("\n".join(lines), 25))
            reader.join(30)
        text = "\n".join(lines)
        if check and code != 0:
            self.fail(f"{' '.join(argv)} failed (exit {code}; log {path}):\n" + last_lines(text, 25))
        return code, text


def one_packet_per_frame(run, out: str) -> None:
    """offload.sh left no router device that merges received frames: their applies
    (the ``profile`` provisioner) did not warn of one."""
    warned = [line.strip() for line in out.splitlines() if "merged into bigger packets" in line]
    if warned:
        run.fail("a router still merges received frames after offload.sh:\n" + "\n".join(warned))


def last_lines(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def virsh(*args) -> list[str]:
    r = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=60)
    return [line.strip() for line in r.stdout.splitlines() if line.strip()] if r.returncode == 0 else []


def libvirt_objects() -> dict[str, set[str]]:
    vols = set()
    if "default" in virsh("pool-list", "--all", "--name"):
        vols = {line.split()[0] for line in virsh("vol-list", "default")[2:]}
    return {"domains": set(virsh("list", "--all", "--name")),
            "networks": set(virsh("net-list", "--all", "--name")),
            "pools": set(virsh("pool-list", "--all", "--name")),
            "volumes": vols}


def lab_objects(inv) -> dict[str, list[str]]:
    return {"domains": sorted(d for d in inv["domains"] if d.startswith(PREFIX)),
            "networks": sorted(n for n in inv["networks"] if n.startswith(PREFIX)),
            "volumes": sorted(v for v in inv["volumes"] if v.startswith(PREFIX))}


def serial_tails(names, since: float) -> str:
    """The last lines of the VMs' serial consoles, if written since ``since`` (the files
    are appended to across runs)."""
    out = []
    for name in names:
        path = Path(f"/var/log/libvirt/qemu/{PREFIX}{name}-serial.log")
        if path.exists() and path.stat().st_mtime >= since:
            out.append(f"--- serial console of {name} ({path}), last lines:\n"
                       + last_lines(path.read_text(errors="replace"), 6))
    return "\n".join(out)


def remove_lab_objects(before) -> list[str]:
    """Remove what is left of the lab by name: only rl-* objects that were not there before."""
    removed = []
    now = libvirt_objects()
    for d in sorted(now["domains"] - before["domains"]):
        if d.startswith(PREFIX):
            virsh("destroy", d)
            virsh("undefine", d, "--remove-all-storage")
            removed.append(f"domain {d}")
    for n in sorted(now["networks"] - before["networks"]):
        if n.startswith(PREFIX):
            virsh("net-destroy", n)
            virsh("net-undefine", n)
            removed.append(f"network {n}")
    for v in sorted(libvirt_objects()["volumes"] - before["volumes"]):
        if v.startswith(PREFIX):
            virsh("vol-delete", "--pool", "default", v)
            removed.append(f"volume {v}")
    return removed


def cleanup(run: Run, before, env, started_libvirt: bool) -> None:
    """Leave no VM, network or volume of the lab behind, whatever happened."""
    if before is not None:
        if lab_objects(libvirt_objects())["domains"]:
            subprocess.run(["vagrant", "destroy", "-f"], env=env, cwd=VAGRANT_DIR, capture_output=True,
                           timeout=600)
        removed = remove_lab_objects(before)
        if removed:
            run.say(f"cleanup: removed by name what vagrant destroy left: {', '.join(removed)}")
        # the box's upload into libvirt's pool, if this run made it (the box itself stays)
        for v in sorted(libvirt_objects()["volumes"] - before["volumes"]):
            if v.startswith(BOX_UPLOAD):
                virsh("vol-delete", "--pool", "default", v)
                run.say(f"cleanup: deleted the box's upload {v} from libvirt's pool default")
        if "default" not in before["pools"] and "default" in libvirt_objects()["pools"] \
                and not libvirt_objects()["volumes"]:
            virsh("pool-destroy", "default")
            virsh("pool-undefine", "default")
            run.say("cleanup: removed libvirt's pool default (vagrant-libvirt made it for this run)")
        CLAIM.unlink(missing_ok=True)
    if started_libvirt:
        subprocess.run(["sh", str(VAGRANT_DIR / "libvirt.sh"), "stop"], capture_output=True, timeout=60)
        run.say("cleanup: stopped libvirtd and virtlogd (this run started them)")
