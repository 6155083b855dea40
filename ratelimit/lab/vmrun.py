"""What the lab's commands share: their progress lines (``say``, on stderr) and running a lab
command again inside the full-kernel VM (``run_in_vm``), for ``lab up --vm`` and ``lab demo --vm``.
"""

import os
import sys

from .. import SOURCE_ROOT
from ..kernel import vm

VM_STATE_DIR = "/tmp/ratelimit-vm-state"  # the guest's /tmp is its own


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def in_vm_cmd(argv: list[str]) -> list[str]:
    """``ratelimit lab ARGV`` as the VM runs it."""
    return [sys.executable, "-m", "ratelimit.lab", *argv]


def run_in_vm(inner: list[str]) -> int:
    """``ratelimit lab INNER`` in the full-kernel VM, with a state directory of its own."""
    say("lab: starting the full-kernel VM (about 20 s to boot; software emulation is slower "
        "than this machine, so expect traffic to take longer)")
    parent = str(SOURCE_ROOT)
    env = {"RATELIMIT_STATE_DIR": VM_STATE_DIR,
           "PYTHONPATH": os.pathsep.join(p for p in (parent, os.environ.get("PYTHONPATH")) if p)}
    return vm.run_in_vm(in_vm_cmd(inner), cwd=parent, env=env)
