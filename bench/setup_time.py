"""Benchmark 1: time to install N flows, by four ways of sending the same plan.

For each mode and flow count one plan is compiled (``flows_request``: 1,024
ports per host, direction ``dest``) and installed on a fresh veth in a fresh
namespace by

- ``ratelimit``: our executor, ``Executor(netns).apply(plan.ops)`` (socket
  opening included);
- ``ratelimit, one qdisc`` (shape mode, up to ``single_max`` flows): our
  executor with every link's class in one HTB qdisc (``Request.group_links``
  N), the layout before groups: the kernel walks a qdisc's
  classes for every class it adds, so this grows with N squared;
- ``tc -batch``: one ``tc -n NS -batch -`` process fed ``tc_batch(plan.ops)``
  (the text is rendered beforehand and not timed: this favours tc);
- ``tc per rule``: one ``tc`` process per operation, as a shell script would
  run them (``sh -e``), measured up to ``per_rule_max`` flows and extrapolated
  beyond: tc -batch's time at N plus the per-operation process overhead
  measured at the largest N run;
- ``ratelimit CLI`` (shape mode): the same request as ``ratelimit --netns NS --if DEV
  -h HOSTS -p PORTS --mode shape ...``, a whole process as a user waits for it (start,
  compile, the lock and record, the kernel, the fingerprint read back);
- ``tcconfig`` (``tcset``, the peer tool): one ``tcset --add`` process per flow.
  tcset always adds a netem leaf, so it cannot run on a kernel without netem,
  and in the software-emulated VM importing it alone takes about 40 s.  So its
  own per-rule work is measured on the host with ``--tc-command`` (it computes
  the rule and prints the tc commands without running them) and multiplied by
  N: a LOWER BOUND, since a real run also starts three or more ``tc`` processes
  per rule and reads back what is installed.

Shape mode runs on the host; police mode needs act_police, so it runs in the
full-kernel VM (under software emulation: compare ratios, not seconds).  The
first flow count also checks that ours and tc -batch leave identical kernel
state (``Executor.snapshot``).  Our runs also record the teardown time and the
kernel memory the plan holds (``Slab`` in /proc/meminfo, after minus before).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, replace

from ratelimit.plan.compile import compile_plan
from ratelimit.plan.script import tc_batch

from .common import (DEV, MIN_CPU_S, BenchError, Clock, flows_request, fmt_time, median, ratio, run, say,
                     shape_flows, Steps)
from .results import new_result, save
from .sandbox import host_has, Netns

NAME = "setup"
VM_WORK = True  # police mode runs in the VM
TOOLS = ("ratelimit", "ratelimit-1qdisc", "ratelimit CLI", "tc-batch", "tc-per-rule", "tcconfig")


@dataclass(frozen=True)
class Config:
    modes: tuple[str, ...]
    flows: tuple[int, ...]
    per_rule_max: int
    tcconfig_rules: int  # dry-run tcset invocations (0: none)
    repeats: int  # per tool for N <= 4096 (fewer above: _repeats); the best (least disturbed) run counts
    single_max: int  # shape mode: the one-qdisc layout is measured up to this many flows


def config(quick: bool, place: str, flows: tuple[int, ...] | None = None) -> Config:
    if place == "vm":
        return Config(("police",), flows or ((256, 1024) if quick else (256, 1024, 4096, 16384, 65536)),
                      per_rule_max=64 if quick else 256, tcconfig_rules=0, repeats=1 if quick else 3,
                      single_max=0)
    modes = ("shape", "police") if host_has("police") else ("shape",)
    return Config(modes, flows or ((256, 1024) if quick else (256, 1024, 4096, 16384, 65536)),
                  per_rule_max=256 if quick else 1024, tcconfig_rules=3 if quick else 10,
                  repeats=3 if quick else 5, single_max=1024 if quick else 16384)


def _ours(ns: Netns, plan) -> Clock:
    from ratelimit.kernel.executor import Executor
    with Clock() as c:
        with Executor(ns.name) as ex:
            ex.apply(plan.ops)
    return c


def _cli_apply(ns: Netns, req) -> tuple[float, float]:
    """(wall, CPU) seconds of ``ratelimit`` applying ``req`` on ``ns`` as a user runs it, with a
    state directory of its own (removed after)."""
    import subprocess
    import tempfile
    from .common import REPO
    argv = [sys.executable, "-m", "ratelimit", "--netns", ns.name, "--if", req.interface,
            "-h", ",".join(str(h) for h in req.only.hosts), "-p", ",".join(f"{lo}-{hi}" for lo, hi in req.only.ports),
            "--mode", req.mode, "-d", req.direction, "-r", str(req.only.down.rate_bps), "--bw", str(req.bandwidth_bps)]
    state = tempfile.mkdtemp(prefix="rlbench-cli-state-")
    try:
        with Clock() as c:  # its CPU counts the child's
            res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO,
                                 env={**os.environ, "RATELIMIT_STATE_DIR": state})
    finally:
        shutil.rmtree(state, ignore_errors=True)
    if res.returncode:
        raise BenchError(f"ratelimit CLI apply: exit {res.returncode}: {res.stderr.strip()}")
    return c.wall, c.cpu


def _slab_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                return int(line.split()[1]) * 1024
    return 0


def _batch(ns: Netns, text: str) -> Clock:
    with Clock() as c:
        run(["tc", "-n", ns.name, "-batch", "-"], input=text, timeout=7200)
    return c


def _per_rule(ns: Netns, text: str) -> Clock:
    script = "".join(f"tc -n {ns.name} {line}\n" for line in text.splitlines())
    with Clock() as c:
        run(["sh", "-e"], input=script, timeout=7200)
    return c


def _snapshot(ns: Netns):
    from ratelimit.kernel.executor import Executor
    with Executor(ns.name) as ex:
        return ex.snapshot([DEV])


def tcset_path() -> str | None:
    """tcconfig's ``tcset``, preferring the one beside this interpreter (no pyenv shim)."""
    here = os.path.join(os.path.dirname(sys.executable), "tcset")
    return here if os.access(here, os.X_OK) else shutil.which("tcset")


def tcconfig_per_rule(rules: int, steps: Steps | None = None) -> dict | None:
    """Best wall time of one ``tcset --add ... --tc-command`` (its own work for
    one rule, nothing run), over ``rules`` different flows; None without tcset."""
    tcset = tcset_path()
    if tcset is None or rules <= 0:
        return None
    samples, cpu = [], []
    for i in range(rules):
        with Clock() as c:
            run([tcset, DEV, "--add", "--rate", "28.8Kbps", "--network", "198.18.0.2/32",
                 "--port", str(10000 + i), "--direction", "outgoing", "--tc-command"], timeout=120)
        samples.append(c.wall)
        cpu.append(c.cpu)
    if steps:
        steps(f"tcconfig: tcset --tc-command {min(samples):.2f} s per rule (best of {rules}; CPU {min(cpu):.2f} s)")
    return {"per_rule_s": min(samples), "median_s": median(samples), "samples": samples,
            "cpu_per_rule_s": min(cpu), "cpu_samples": cpu, "tcset": tcset}


def measure(quick: bool, place: str, *, flows: tuple[int, ...] | None = None, outdir=None) -> dict:
    cfg = config(quick, place, flows)
    doc = new_result(NAME, quick)
    doc["config"] = cfg.__dict__
    n_steps = sum(2 * _repeats(cfg, n) + (n <= cfg.per_rule_max) + (mode == "shape" and n <= cfg.single_max)
                  for n in cfg.flows for mode in cfg.modes) + (1 if cfg.tcconfig_rules else 0)
    steps = Steps(NAME, n_steps)
    rows = doc["rows"]
    tcc = tcconfig_per_rule(cfg.tcconfig_rules, steps) if "shape" in cfg.modes else None
    if tcc:
        doc["tcconfig"] = tcc
    for mode in cfg.modes:
        rule_basis = None  # (flows, ops, per-op overhead s)
        for i, n_req in enumerate(cfg.flows):
            n = shape_flows(n_req) if mode == "shape" else n_req
            req = flows_request(n, mode)
            t_compile, plan = _timed(compile_plan, req)
            t_render, text = _timed(tc_batch, plan.ops)
            ops = len(plan.ops)
            repeats = _repeats(cfg, n)
            samples: dict[str, list[float]] = {"ratelimit": [], "tc-batch": [], "tc-per-rule": []}
            cpu: dict[str, list[float]] = {"ratelimit": [], "tc-batch": [], "tc-per-rule": []}
            teardown, memory = [], []
            for r in range(repeats):
                order = ("ratelimit", "tc-batch") if r % 2 == 0 else ("tc-batch", "ratelimit")
                snaps = {}
                for tool in order:
                    with Netns(f"setup-{tool[:5]}") as ns:
                        slab0 = _slab_bytes()
                        c = _ours(ns, plan) if tool == "ratelimit" else _batch(ns, text)
                        if tool == "ratelimit":
                            memory.append(_slab_bytes() - slab0)
                        t = c.wall
                        samples[tool].append(c.wall)
                        cpu[tool].append(c.cpu)
                        if i == 0 and r == 0 and n <= 4096:
                            snaps[tool] = _snapshot(ns)
                        if tool == "ratelimit":
                            from ratelimit.kernel.executor import Executor
                            t0 = time.perf_counter()
                            with Executor(ns.name) as ex:
                                ex.remove(plan.teardown())
                            teardown.append(time.perf_counter() - t0)
                    steps(f"{mode} {n:,} flows ({ops:,} ops) {tool}: {fmt_time(t)} (CPU {fmt_time(cpu[tool][-1])})")
                if len(snaps) == 2:
                    same = snaps["ratelimit"] == snaps["tc-batch"]
                    doc["identical_state"] = doc.get("identical_state", True) and same
                    if not same:
                        doc["notes"].append(f"{mode} {n} flows: kernel state after our executor differs "
                                            "from tc -batch's (Executor.snapshot)")
                        say(NAME, "WARNING: our executor and tc -batch left different kernel state")
            single = None
            if mode == "shape" and n <= cfg.single_max:
                one = compile_plan(replace(req, group_links=n))
                with Netns("setup-1qdisc") as ns:
                    single = _ours(ns, one)
                steps(f"{mode} {n:,} flows ratelimit, one qdisc: {fmt_time(single.wall)}")
            cli = []
            if mode == "shape":
                for _ in range(repeats):
                    with Netns("setup-cli") as ns:
                        cli.append(_cli_apply(ns, req))
                steps(f"{mode} {n:,} flows ratelimit CLI (a whole process): {fmt_time(min(w for w, _ in cli))}")
            if n <= cfg.per_rule_max:
                with Netns("setup-rule") as ns:
                    c = _per_rule(ns, text)
                t = c.wall
                samples["tc-per-rule"].append(t)
                cpu["tc-per-rule"].append(c.cpu)
                steps(f"{mode} {n:,} flows tc per rule: {fmt_time(t)}")
                rule_basis = (n, ops, max(0.0, (t - min(samples["tc-batch"])) / ops),
                              max(0.0, (c.cpu - min(cpu["tc-batch"])) / ops))
            common = {"mode": mode, "flows": n, "requested_flows": n_req, "ops": ops,
                      "compile_s": t_compile, "render_s": t_render}
            for tool in ("ratelimit", "tc-batch"):
                rows.append({**common, "tool": tool, "seconds": min(samples[tool]),
                             "median_s": median(samples[tool]), "samples": samples[tool],
                             "cpu_s": min(cpu[tool]), "cpu_samples": cpu[tool], "extrapolated": False})
            rows[-2]["teardown_s"] = min(teardown)
            rows[-2]["kernel_memory_bytes"] = int(median(memory))
            if cli:
                walls = [w for w, _ in cli]
                rows.append({**common, "tool": "ratelimit CLI", "seconds": min(walls), "median_s": median(walls),
                             "samples": walls, "cpu_s": min(c for _, c in cli), "extrapolated": False})
            if single is not None:
                rows.append({**common, "tool": "ratelimit-1qdisc", "seconds": single.wall, "samples": [single.wall],
                             "cpu_s": single.cpu, "extrapolated": False})
            if samples["tc-per-rule"]:
                rows.append({**common, "tool": "tc-per-rule", "seconds": samples["tc-per-rule"][0],
                             "samples": samples["tc-per-rule"], "cpu_s": cpu["tc-per-rule"][0],
                             "extrapolated": False})
            elif rule_basis:
                n0, ops0, per_op, per_op_cpu = rule_basis
                rows.append({**common, "tool": "tc-per-rule", "extrapolated": True,
                             "seconds": min(samples["tc-batch"]) + ops * per_op,
                             "cpu_s": min(cpu["tc-batch"]) + ops * per_op_cpu,
                             "basis": f"tc -batch at {n:,} flows + {ops:,} ops x {per_op * 1000:.2f} ms "
                                      f"process overhead per op (measured at {n0:,} flows)"})
            if tcc and mode == "shape":
                rows.append({**common, "tool": "tcconfig", "extrapolated": True, "lower_bound": True,
                             "seconds": n * tcc["per_rule_s"], "cpu_s": n * tcc["cpu_per_rule_s"],
                             "basis": f"{n:,} rules x {tcc['per_rule_s']:.2f} s (tcset --tc-command, "
                                      f"best of {len(tcc['samples'])}); kernel work and tc processes not included"})
            ours, batch = min(samples["ratelimit"]), min(samples["tc-batch"])
            say(NAME, f"{mode} {n:,} flows: ratelimit {fmt_time(ours)}, tc -batch {fmt_time(batch)} "
                      f"(tc -batch / ours = {ratio(batch, ours):.2f} wall, "
                      f"{fmt_ratio(cpu_ratio(min(cpu['tc-batch']), min(cpu['ratelimit'])))} CPU; best of {repeats})")
            save(doc, outdir) if outdir else save(doc)
    if place == "vm":
        doc["notes"].append("police mode measured in the full-kernel VM under software emulation (TCG): "
                            "absolute times are about 10x the host's; compare ratios")
    if tcc is None and place == "host" and cfg.tcconfig_rules:
        doc["notes"].append("tcconfig (tcset) not installed: pip install tcconfig")
    if tcc:
        doc["notes"].append(
            "tcconfig is measured as a dry run (tcset --add ... --tc-command: its own work for one rule, "
            "nothing executed) because it cannot run for real here: on the host tcset stops before doing "
            "anything (it checks for sch_netem with lsmod, and this kernel has neither modules nor netem), "
            "and in the software-emulated VM importing it takes about 40 s per process.  Its figures are "
            "lower bounds: a real tcset also starts three or more tc processes per rule and reads back "
            "what is installed.")
    return doc


def cpu_ratio(num: float, den: float) -> float | None:
    """CPU-time ratio, or None when either figure is too small for the clock
    (process CPU time is counted in scheduler ticks)."""
    return ratio(num, den) if min(num, den) >= MIN_CPU_S else None


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def _repeats(cfg: Config, n: int) -> int:
    """Runs per tool: all of them up to 4,096 flows, 3 up to 16,384, then 2 (each tool
    goes first once: the first run of a size grows the kernel's slabs, the second reuses them)."""
    return cfg.repeats if n <= 4096 else min(cfg.repeats, 3) if n <= 16384 else min(cfg.repeats, 2)


def _timed(fn, *a):
    t0 = time.perf_counter()
    out = fn(*a)
    return time.perf_counter() - t0, out


def main(args) -> int:
    from .sandbox import in_vm, load_modules, run_vm_part
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    flows = tuple(args.flows) if args.flows else None
    if in_vm():
        load_modules()
        save(measure(args.quick, "vm", flows=flows, outdir=outdir), outdir)
        return 0
    doc = measure(args.quick, "host", flows=flows, outdir=outdir)
    path = save(doc, outdir)
    say(NAME, f"wrote {path}")
    if args.vm and "police" not in doc["config"]["modes"]:
        fwd = ["--quick"] if args.quick else []
        if flows:
            fwd += ["--flows", *map(str, flows)]
        rc = run_vm_part(NAME, fwd, outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0
