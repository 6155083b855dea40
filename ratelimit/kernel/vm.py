"""Run a command inside a VM that boots a stock distribution kernel.

Some machines (our sandboxes among them) run a kernel that lacks most of
traffic control: no netem, no police, no gact.  This module boots Debian's
stock kernel (``linux-image-amd64``, every tc module included) under qemu with
virtme-ng, shares the host's own filesystem into the guest, runs one command
there as root and hands back its output and exit status.

What the guest sees (virtme-ng's defaults, measured):
  - ``/`` is the host's root over 9p, **read-only**; ``/etc``, ``/usr``, ``/var``,
    ``/home``, ``/opt``, ``/srv`` and ``/tmp`` are copy-on-write overlays whose
    changes vanish with the VM.  So the checkout, ``/root`` and ``/work`` are
    read-only, ``/tmp`` is writable (a private copy).
  - Directories passed as ``rwdirs`` are shared read-write at the same path:
    results written there reach the host.  Every run gets one of its own for
    its wrapper script and timings.
  - The command runs in ``cwd`` (default: the caller's), with the host's PATH
    (plus this interpreter's ``bin/``), ``RATELIMIT_IN_VM=1`` and
    ``PYTHONDONTWRITEBYTECODE=1``; see ``_guest_env`` for what else passes.

KVM: ``kvm='auto'`` means *off* unless ``RATELIMIT_VM_KVM=1``.  On our
machines ``/dev/kvm`` exists but a KVM guest hangs at boot, so software
emulation (TCG; boot ~20 s, CPU-bound work ~10x slower) is the safe default.

Entry points: ``run_in_vm(argv) -> exit code``, ``run_vm(argv) -> VMResult``
(with timings), and ``vm_main(argv)`` behind ``ratelimit vm -- COMMAND`` and
``python -m ratelimit.kernel.vm -- COMMAND``.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import EXIT_NOT_FOUND, EXIT_USAGE, command_exit, RatelimitError
from ..spec.units import parse_count, parse_seconds
from .proc import start_and_pump

DEFAULT_MEMORY = "1G"
DEFAULT_TIMEOUT_S = 900.0
MAX_TIMEOUT_S = 7 * 86400.0
MAX_CPUS = 64
IN_VM_ENV = "RATELIMIT_IN_VM"
KVM_ENV = "RATELIMIT_VM_KVM"
KERNEL_ENV = "RATELIMIT_VM_KERNEL"
# Host variables the guest inherits (besides PATH, which is always passed);
# anything else must be given in ``env``.
PASSED_ENV = ("HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
              "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "CI")
PASSED_ENV_PREFIXES = ("RATELIMIT_",)
EXIT_TIMEOUT = 124  # like timeout(1)


class VMError(RatelimitError):
    """The VM could not be started or did not finish."""

    exit_code = 1


class VMUnavailable(VMError):
    """A part needed to boot the VM is missing (qemu, virtme-ng, a stock kernel)."""

    exit_code = EXIT_NOT_FOUND


class VMTimeout(VMError):
    """The guest ran past its time limit and was killed."""

    exit_code = EXIT_TIMEOUT


@dataclass(frozen=True)
class VMResult:
    exit_code: int
    kernel: str  # the vmlinuz booted ("" when run directly, already inside a VM)
    guest_release: str  # `uname -r` in the guest ("" if the command never started)
    wall_s: float  # host wall time from starting vng to its exit
    command_s: float  # guest time spent in the command itself
    boot_s: float  # wall_s - command_s: booting, sharing the filesystem, shutting down


def in_vm() -> bool:
    """True inside a guest started by this module."""
    return os.environ.get(IN_VM_ENV) == "1"


def _release_key(release: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", release))


def stock_kernels() -> list[str]:
    """``/boot/vmlinuz-*`` kernels that ship tc modules (netem at least), newest first.

    A kernel without ``/lib/modules/<release>/kernel/net/sched/sch_netem.ko*``
    (such as a sandbox's own trimmed kernel) is not a stock full kernel.
    """
    found = []
    for path in glob.glob("/boot/vmlinuz-*"):
        release = os.path.basename(path)[len("vmlinuz-"):]
        if glob.glob(f"/lib/modules/{release}/kernel/net/sched/sch_netem.ko*"):
            found.append((release, path))
    found.sort(key=lambda rp: _release_key(rp[0]), reverse=True)
    return [path for _, path in found]


def find_kernel(kernel: str | None = None) -> str:
    """The kernel image to boot: ``kernel``, else ``$RATELIMIT_VM_KERNEL``, else the
    newest stock kernel in ``/boot``."""
    source = "--kernel"
    if not kernel and os.environ.get(KERNEL_ENV):
        kernel, source = os.environ[KERNEL_ENV], KERNEL_ENV
    if kernel:
        if not os.path.isfile(kernel) or not os.access(kernel, os.R_OK):
            raise VMUnavailable(f"{source}: {kernel} is not a readable kernel image")
        return kernel
    kernels = stock_kernels()
    if not kernels:
        raise VMUnavailable("no stock kernel with traffic-control modules in /boot: "
                            "apt-get install linux-image-amd64 (or pass --kernel PATH)")
    return kernels[0]


def find_vng() -> str:
    """The ``vng`` executable: next to this interpreter first, then on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "vng")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("vng")
    if found is None:
        raise VMUnavailable("virtme-ng (vng) is missing: pip install virtme-ng")
    return found


def _check_host_tools() -> None:
    machine = platform.machine()
    qemu = f"qemu-system-{machine}"
    if shutil.which(qemu) is None:
        pkg = "qemu-system-x86" if machine in ("x86_64", "i686") else "qemu-system"
        raise VMUnavailable(f"{qemu} is missing: apt-get install {pkg}")
    if shutil.which("busybox") is None:
        raise VMUnavailable("busybox is missing (virtme-ng builds the guest's initramfs "
                            "with it): apt-get install busybox-static")


def _use_kvm(kvm: bool | str) -> bool:
    if kvm == "auto":
        return os.environ.get(KVM_ENV, "").lower() in ("1", "true", "yes")
    if isinstance(kvm, bool):
        return kvm
    raise VMError(f"kvm: {kvm!r} is not one of 'auto', True, False")


_MEMORY_RE = re.compile(r"^[1-9][0-9]*[MG]?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _guest_env(env: Mapping[str, str] | None) -> dict[str, str]:
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    if bindir not in path.split(os.pathsep):
        path = bindir + os.pathsep + path
    out = {k: v for k, v in os.environ.items()
           if k in PASSED_ENV or k.startswith(PASSED_ENV_PREFIXES)}
    out.update(PATH=path, PYTHONDONTWRITEBYTECODE="1", TMPDIR="/tmp")
    out.update(env or {})
    out[IN_VM_ENV] = "1"
    for k in out:
        if not _ENV_NAME_RE.match(k):
            raise VMError(f"env: {k!r} is not a valid environment variable name")
    return out


def _script(argv: Sequence[str], cwd: str, env: Mapping[str, str], workdir: str,
            announce: bool) -> str:
    """The shell script the guest runs: it sets the environment, records timings
    and the guest's kernel release in ``workdir`` and exits with the command's status."""
    q = shlex.quote
    lines = ["# written by ratelimit.kernel.vm; runs inside the guest",
             f"W={q(workdir)}",
             'read up _ < /proc/uptime; echo "$up" > "$W/start"; uname -r > "$W/release"']
    if announce:
        lines.append('echo "ratelimit vm: guest kernel $(uname -r), command starts at '
                     'guest uptime ${up} s" >&2')
    lines += [f"export {k}={q(v)}" for k, v in sorted(env.items())]
    lines += [f"cd {q(cwd)} || exit 125",
              " ".join(q(a) for a in argv),
              "rc=$?",
              'read up _ < /proc/uptime; echo "$up" > "$W/end"',
              'exit "$rc"']
    return "\n".join(lines) + "\n"


def vng_argv(*, vng: str, kernel: str, memory: str, cpus: int | None, kvm: bool,
             rwdirs: Sequence[str], script: str) -> list[str]:
    """The ``vng`` command line (pure; see ``run_vm``)."""
    argv = [vng, "--run", kernel, "--memory", memory]
    if not kvm:
        argv.append("--disable-kvm")
    if cpus:
        argv += ["--cpus", str(cpus)]
    for d in rwdirs:
        argv.append(f"--rwdir={d}")
    argv += ["--exec", f"sh {shlex.quote(script)}"]
    return argv


def _read_float(path: str) -> float | None:
    try:
        with open(path) as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run_vm(argv: Sequence[str], *, kernel: str | None = None, memory: str = DEFAULT_MEMORY,
           cpus: int | None = None, timeout_s: float | None = DEFAULT_TIMEOUT_S,
           kvm: bool | str = "auto", cwd: str | None = None,
           env: Mapping[str, str] | None = None, rwdirs: Sequence[str] = (),
           stdout=None, stderr=None, on_output: Callable[[str], None] | None = None,
           announce: bool = True) -> VMResult:
    """Boot the stock kernel, run ``argv`` in the guest as root, return a ``VMResult``.

    Output: by default the guest command's stdout and stderr go to this
    process's ``sys.stdout`` and ``sys.stderr``; ``stdout``/``stderr`` may be a
    file descriptor, a file or a text stream such as ``io.StringIO``;
    ``on_output`` instead receives every line of both as it arrives.  ``timeout_s`` (None or 0: no limit) bounds the
    whole run, boot included; past it the process group of vng and qemu is
    killed and ``VMTimeout`` is raised.  Already inside such a VM
    (``RATELIMIT_IN_VM=1``), ``argv`` simply runs here.
    """
    argv = list(argv)
    if not argv:
        raise VMError("no command given to run in the VM")
    if not _MEMORY_RE.match(memory):
        raise VMError(f"--memory: {memory} is not a size like 1G or 1536M")
    cwd = os.path.abspath(cwd or os.getcwd())
    rwdirs = [os.path.abspath(d) for d in rwdirs]
    for d in rwdirs:
        if not os.path.isdir(d):
            raise VMError(f"--rwdir: {d} is not a directory")
    guest_env = _guest_env(env)
    timeout_s = timeout_s or None

    if in_vm():
        return _run_here(argv, cwd, guest_env, timeout_s, stdout, stderr, on_output)

    kernel = find_kernel(kernel)
    vng = find_vng()
    _check_host_tools()
    use_kvm = _use_kvm(kvm)
    if use_kvm and not os.access("/dev/kvm", os.R_OK | os.W_OK):
        raise VMUnavailable(f"KVM requested ({KVM_ENV}=1 or --kvm) but /dev/kvm is not usable")

    workdir = tempfile.mkdtemp(prefix="ratelimit-vm-", dir="/tmp")
    try:
        script = os.path.join(workdir, "run.sh")
        with open(script, "w") as f:
            f.write(_script(argv, cwd, guest_env, workdir, announce))
        # vng's default is every CPU of the machine; a guest with more CPUs than this process may
        # run on crawls under software emulation (two on one: the suite's guest had not
        # collected its tests after 5 minutes)
        cpus = cpus or len(os.sched_getaffinity(0))
        cmd = vng_argv(vng=vng, kernel=kernel, memory=memory, cpus=cpus, kvm=use_kvm,
                       rwdirs=[workdir, *rwdirs], script=script)
        host_env = dict(os.environ)
        # vng runs virtme-run by name: this interpreter's bin/ must be on PATH
        host_env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + host_env.get("PATH", "")
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        proc, finished = start_and_pump(cmd, cwd=cwd, env=host_env, stdout=stdout, stderr=stderr,
                                         on_output=on_output, deadline=deadline)
        if not finished:
            raise VMTimeout(f"the VM did not finish within {timeout_s:g} s and was killed "
                            f"(kernel {kernel}; raise --timeout, or check that the guest boots)")
        wall = time.monotonic() - start
        t0, t1 = _read_float(os.path.join(workdir, "start")), _read_float(os.path.join(workdir, "end"))
        try:
            with open(os.path.join(workdir, "release")) as f:
                release = f.read().strip()
        except OSError:
            release = ""
        if t0 is None:
            raise VMError(f"the VM exited with status {proc.returncode} before running the command "
                          f"(kernel {kernel}); run `vng -r {kernel} --disable-kvm --exec true` to see why")
        command_s = (t1 - t0) if t1 is not None else 0.0
        return VMResult(proc.returncode, kernel, release, wall, command_s, max(0.0, wall - command_s))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_here(argv, cwd, env, timeout_s, stdout, stderr, on_output) -> VMResult:
    full_env = dict(os.environ)
    full_env.update(env)
    start = time.monotonic()
    proc, finished = start_and_pump(argv, cwd=cwd, env=full_env, stdout=stdout, stderr=stderr,
                                     on_output=on_output,
                                     deadline=None if timeout_s is None else start + timeout_s)
    if not finished:
        raise VMTimeout(f"the command did not finish within {timeout_s:g} s and was killed")
    wall = time.monotonic() - start
    return VMResult(proc.returncode, "", os.uname().release, wall, wall, 0.0)


def run_in_vm(argv: Sequence[str], *, kernel: str | None = None, memory: str = DEFAULT_MEMORY,
              timeout_s: float | None = DEFAULT_TIMEOUT_S, kvm: bool | str = "auto",
              cwd: str | None = None, env: Mapping[str, str] | None = None, **kw) -> int:
    """``run_vm`` returning just the guest command's exit status."""
    return run_vm(argv, kernel=kernel, memory=memory, timeout_s=timeout_s, kvm=kvm,
                  cwd=cwd, env=env, **kw).exit_code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ratelimit vm",
        description="Run COMMAND as root inside a VM booted from the stock kernel "
                    "(every tc module), with this machine's filesystem shared in "
                    "read-only (/tmp is a private writable copy).",
        epilog=f"KVM is off unless --kvm or {KVM_ENV}=1; exit status is COMMAND's, "
               f"{EXIT_TIMEOUT} on timeout.")
    p.add_argument("--memory", "-m", default=DEFAULT_MEMORY, help="guest memory (default 1G)")
    p.add_argument("--cpus", default=None, help="guest CPUs (default: the CPUs this process may run on)")
    p.add_argument("--timeout", default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"kill the VM after S seconds, boot included (default {DEFAULT_TIMEOUT_S:g}; 0: never)")
    p.add_argument("--kernel", default=None, metavar="PATH",
                   help=f"kernel image (default: ${KERNEL_ENV} or the newest stock /boot/vmlinuz-*)")
    kvm = p.add_mutually_exclusive_group()
    kvm.add_argument("--kvm", dest="kvm", action="store_const", const=True, default="auto",
                     help="use KVM (hangs on some hosts)")
    kvm.add_argument("--no-kvm", dest="kvm", action="store_const", const=False,
                     help="software emulation (the default)")
    p.add_argument("--rwdir", action="append", default=[], metavar="DIR",
                   help="share DIR read-write (repeatable)")
    p.add_argument("--quiet", "-q", action="store_true", help="no timing lines on stderr")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    return p


def vm_main(argv: list[str]) -> int:
    """``ratelimit vm [options] -- COMMAND...``: returns COMMAND's exit status.

    Usage errors print usage and return 2; a VM that cannot start or times out
    raises ``VMError`` (a ``RatelimitError``) for the CLI to report.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    command = args.command
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.print_usage(sys.stderr)
        print("ratelimit vm: error: no COMMAND given (ratelimit vm -- COMMAND ...)", file=sys.stderr)
        return EXIT_USAGE
    cpus = None if args.cpus is None else parse_count(args.cpus, "--cpus", 1, MAX_CPUS)
    timeout_s = parse_seconds(args.timeout, "--timeout", 0, MAX_TIMEOUT_S)
    result = run_vm(command, kernel=args.kernel, memory=args.memory, cpus=cpus,
                    timeout_s=timeout_s, kvm=args.kvm, rwdirs=args.rwdir,
                    announce=not args.quiet)
    if not args.quiet:
        print(f"ratelimit vm: exit {result.exit_code}; boot+shutdown {result.boot_s:.1f} s, "
              f"command {result.command_s:.1f} s, wall {result.wall_s:.1f} s", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    raise SystemExit(command_exit(vm_main, sys.argv[1:]))
