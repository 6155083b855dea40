"""ratelimit.kernel.vm without booting a VM: the guest script, the vng command line,
missing-part errors, timeouts and output handling (through the in-VM path,
which runs the command directly with the same plumbing)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from bench.common import wait_until
from ratelimit import SOURCE_ROOT
from ratelimit.errors import RatelimitError
from ratelimit.kernel import vm


def test_guest_script_sets_env_cwd_records_timings_and_keeps_the_exit_status(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    script = tmp_path / "run.sh"
    env = {"FOO": "a b'c \"$HOME\"", "RATELIMIT_IN_VM": "1"}
    script.write_text(vm._script(["sh", "-c", 'printf "%s|%s" "$FOO" "$(pwd)"; exit 3'],
                                 str(tmp_path), env, str(work), announce=True))
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True)
    assert r.returncode == 3
    assert r.stdout == f"a b'c \"$HOME\"|{tmp_path}"
    assert "ratelimit vm: guest kernel" in r.stderr
    assert (work / "release").read_text().strip() == os.uname().release
    assert float((work / "end").read_text()) >= float((work / "start").read_text())


def test_guest_script_reports_a_missing_cwd_as_125(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(vm._script(["true"], str(tmp_path / "nope"), {}, str(tmp_path), announce=False))
    assert subprocess.run(["sh", str(script)], capture_output=True).returncode == 125


def test_vng_command_line():
    argv = vm.vng_argv(vng="/x/vng", kernel="/boot/vmlinuz-6.1.0-56-amd64", memory="1G", cpus=None,
                       kvm=False, rwdirs=["/tmp/a", "/tmp/b c"], script="/tmp/a/run.sh")
    assert argv == ["/x/vng", "--run", "/boot/vmlinuz-6.1.0-56-amd64", "--memory", "1G",
                    "--disable-kvm", "--rwdir=/tmp/a", "--rwdir=/tmp/b c", "--exec", "sh /tmp/a/run.sh"]
    kvm = vm.vng_argv(vng="vng", kernel="k", memory="2G", cpus=2, kvm=True, rwdirs=[], script="s")
    assert "--disable-kvm" not in kvm and kvm[kvm.index("--cpus") + 1] == "2"


def test_kvm_is_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv(vm.KVM_ENV, raising=False)
    assert vm._use_kvm("auto") is False
    monkeypatch.setenv(vm.KVM_ENV, "1")
    assert vm._use_kvm("auto") is True
    assert vm._use_kvm(False) is False


def test_guest_environment_is_chosen_not_inherited(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN_FOR_TEST", "x")
    monkeypatch.setenv("RATELIMIT_SOMETHING", "y")
    env = vm._guest_env({"EXTRA": "1"})
    assert "SECRET_TOKEN_FOR_TEST" not in env
    assert env["RATELIMIT_SOMETHING"] == "y" and env["EXTRA"] == "1"
    assert env["RATELIMIT_IN_VM"] == "1"
    assert os.path.dirname(sys.executable) in env["PATH"].split(os.pathsep)
    with pytest.raises(vm.VMError, match="not a valid environment variable name"):
        vm._guest_env({"BAD NAME": "1"})


def test_stock_kernels_have_tc_modules():
    for path in vm.stock_kernels():
        release = os.path.basename(path)[len("vmlinuz-"):]
        assert os.path.isdir(f"/lib/modules/{release}/kernel/net/sched")


def test_a_missing_kernel_image_is_a_clear_error():
    with pytest.raises(vm.VMUnavailable, match="--kernel: /nonexistent/vmlinuz is not a readable kernel image"):
        vm.find_kernel("/nonexistent/vmlinuz")
    assert issubclass(vm.VMUnavailable, RatelimitError)


def test_the_kernel_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(vm.KERNEL_ENV, "/nonexistent/vmlinuz")
    with pytest.raises(vm.VMUnavailable, match="RATELIMIT_VM_KERNEL: /nonexistent/vmlinuz is not"):
        vm.find_kernel()


def test_missing_qemu_and_busybox_name_their_packages(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(vm.VMUnavailable, match="apt-get install qemu-system-x86"):
        vm._check_host_tools()
    qemu = tmp_path / f"qemu-system-{os.uname().machine}"
    qemu.write_text("#!/bin/sh\n")
    qemu.chmod(0o755)
    with pytest.raises(vm.VMUnavailable, match="apt-get install busybox-static"):
        vm._check_host_tools()


def test_missing_vng_names_its_pip_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(vm.VMUnavailable, match="pip install virtme-ng"):
        vm.find_vng()


def test_bad_memory_is_refused():
    with pytest.raises(vm.VMError, match="--memory: lots is not a size"):
        vm.run_vm(["true"], memory="lots")


# -- the process plumbing, through the in-VM path (no qemu) --------------------

@pytest.fixture
def here(monkeypatch):
    monkeypatch.setenv(vm.IN_VM_ENV, "1")


def test_exit_status_and_output_reach_the_caller(here, tmp_path):
    out, err = io.StringIO(), tmp_path / "err"
    with open(err, "wb") as f:
        r = vm.run_vm(["sh", "-c", "echo out; echo err >&2; exit 4"], stdout=out, stderr=f)
    assert r.exit_code == 4
    assert out.getvalue() == "out\n"
    assert err.read_text() == "err\n"
    assert vm.run_in_vm(["true"]) == 0


def test_output_lines_go_to_a_callback_with_the_last_partial_line(here):
    lines = []
    vm.run_vm(["sh", "-c", "echo a; echo b >&2; printf c"], on_output=lines.append)
    assert sorted(lines) == ["a", "b", "c"]


def test_a_hung_command_is_killed_with_its_whole_process_group(here, tmp_path):
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(vm.VMTimeout, match="did not finish within 1 s"):
        vm.run_vm(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout_s=1,
                  stdout=io.StringIO())
    assert time.monotonic() - t0 < 20
    pid = int(pidfile.read_text())
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 60, f"the guest's process {pid} gone")
    assert vm.VMTimeout.exit_code == 124


def test_vm_main_usage(capsys):
    assert vm.vm_main([]) == 2
    assert "no COMMAND given" in capsys.readouterr().err
    assert vm.vm_main(["--help"]) == 0
    assert "-- COMMAND" in capsys.readouterr().out
    assert vm.vm_main(["--memory"]) == 2


def test_vm_main_runs_the_command_after_the_double_dash(here, capfd):
    assert vm.vm_main(["--quiet", "--", "sh", "-c", "echo hi; exit 5"]) == 5
    assert capfd.readouterr().out == "hi\n"


def test_python_dash_m_entry_point_reports_errors_on_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "ratelimit.kernel.vm", "--kernel", "/nonexistent", "--", "true"],
                       capture_output=True, text=True, cwd=str(SOURCE_ROOT),
                       env={**os.environ, vm.IN_VM_ENV: "0"})
    assert r.returncode == vm.VMUnavailable.exit_code
    assert r.stderr.strip().splitlines() == ["ratelimit: --kernel: /nonexistent is not a readable kernel image"]
