"""Benchmark 3: time to read every link's counters with N links installed, and what the
dashboard costs the router while a browser watches.

A plan of N links is installed in a throwaway namespace (shape mode: one direction on
a veth while N fits one device, else both directions, N/2 on the veth and N/2 on its
IFB device; police mode: one direction), its request saved as the state ratelimit
keeps.  Then, alternately, best and median of ``repeats`` runs each:

* ``ratelimit``: ``Executor(netns).stats(plan)`` (socket opening included; one row
  per link, counters mapped to (host, port));
* ``service.statistics``: what ``ratelimit --stats`` calls (state file, the ownership
  check, the plan's link table -- compiled once per request and kept -- the dumps, a
  dict per link); ``cold`` is its first call in a process (it compiles the plan);
* ``service.Poller``: the dashboard's read (columns, readers kept open);
* ``ratelimit --stats --json``: the command a script polls, as a whole process;
* ``baseline service.statistics``: the same call of the baseline revision (the rows keep
  the names from before ``statistics`` and ``Poller`` moved to ``readout``)
  (``--baseline``, default the commit before the statistics were rebuilt for scale),
  run from a ``git archive`` of it in a process of its own;
* the ``tc -s`` dumps holding the same counters (shape mode: ``tc -s class show``,
  police mode: ``tc -s filter show``, on every device of the plan): tc only prints
  text, so the comparison favours tc.

Dashboard rows: the server's CPU (share of one core) with one headless Chromium page
open, at 1 Hz, for this checkout and the baseline, alternately: with the kernel's
counters of the largest N (idle links), and with a synthetic source in which every link
moves every second (what the live stream carried per link before: ``dashboard_links``).

Shape mode runs on the host; police mode in the full-kernel VM (software emulation:
compare ratios).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ratelimit.plan.compile import compile_plan
from ratelimit.plan.layout import MAX_SHAPE_LINKS

from . import dashboard
from .common import DEV, REPO, BenchError, Clock, flows_request, fmt_time, median, ratio, run, say, shape_flows, Steps
from .results import new_result, save
from .sandbox import host_has, in_vm, Netns

NAME = "stats"
VM_WORK = True
BASELINE = "6531b34"  # the last commit before statistics and the dashboard were rebuilt for scale (issue 11)


@dataclass(frozen=True)
class Config:
    modes: tuple[str, ...]
    flows: tuple[int, ...]
    repeats: int
    dashboard_links: tuple[int, ...]  # synthetic source sizes (empty: none)
    dashboard_window_s: float
    dashboard_rounds: int


def config(quick: bool, place: str, flows=None, dashboard_links=None) -> Config:
    if place == "vm":
        return Config(("police",), tuple(flows or ((256, 1024) if quick else (256, 1024, 4096, 16384, 65536))),
                      3 if quick else 5, (), 0, 0)
    modes = ("shape", "police") if host_has("police") else ("shape",)
    links = tuple(n for n in dashboard_links or ((16384,) if quick else (16384, 65536)) if n > 0)
    return Config(modes, tuple(flows or ((256, 1024) if quick else (256, 1024, 4096, 16384, 65536))),
                  3 if quick else 7, links, 8.0 if quick else 20.0, 1 if quick else 2)


def stats_request(n: int, mode: str, netns: str):
    """N links: one direction, or both (N/2 each) when N does not fit one device in shape mode."""
    if mode == "shape" and n > MAX_SHAPE_LINKS:
        return flows_request(n // 2, mode, netns=netns, direction="both")
    return flows_request(shape_flows(n) if mode == "shape" else n, mode, netns=netns)


def _timed(fn) -> dict:
    with Clock() as c:
        out = fn()
    return {"wall_s": c.wall, "cpu_s": c.cpu, "out": out}


def _tc(ns: Netns, what: str, devs) -> int:
    size = 0
    for dev in devs:
        size += len(run(["tc", "-n", ns.name, "-s", what, "show", "dev", dev], timeout=600).stdout)
    return size


def _row(common: dict, tool: str, walls: list, cpus: list, **extra) -> dict:
    return {**common, "tool": tool, "seconds": min(walls), "median_s": median(walls), "samples": walls,
            "cpu_s": min(cpus), "cpu_samples": cpus, **extra}


def measure(quick: bool, place: str, *, flows=None, outdir=None, baseline: str | None = BASELINE,
            dashboard_links=None) -> dict:
    from ratelimit.state import fingerprint
    from ratelimit.service import readout
    from ratelimit.state import records as state_files
    from ratelimit.kernel.executor import Executor
    cfg = config(quick, place, flows, dashboard_links)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "baseline": baseline}
    steps = Steps(NAME, len(cfg.modes) * len(cfg.flows) + len(cfg.dashboard_links))
    tree = dashboard.baseline_tree(baseline) if baseline and place == "host" else None
    if baseline and tree is None and place == "host":
        doc["notes"].append(f"baseline {baseline}: git could not give its tree; measured without it")
    state_dir = tempfile.mkdtemp(prefix="rlbench-state-")
    old_state = os.environ.get("RATELIMIT_STATE_DIR")
    os.environ["RATELIMIT_STATE_DIR"] = state_dir
    try:
        last = None
        for mode in cfg.modes:
            tc_what = "class" if mode == "shape" else "filter"
            for n_req in cfg.flows:
                with Netns("stats") as ns:
                    req = stats_request(n_req, mode, ns.name)
                    plan = compile_plan(req)
                    n = len(plan.flows)
                    with Executor(ns.name) as ex:
                        t0 = time.perf_counter()
                        ex.apply(plan.ops)
                        install_s = time.perf_counter() - t0
                    state_files.save(req, fingerprint.of_plan(plan))
                    _save_v1(state_files, req, state_dir)
                    common = {"mode": mode, "flows": n, "requested_flows": n_req, "install_s": install_s,
                              "direction": req.direction}
                    doc["rows"] += _read_side_by_side(cfg, ns, plan, tc_what, common, tree, state_dir, readout,
                                                      Executor, steps)
                    if mode == "shape" and place == "host" and n_req == max(cfg.flows):
                        doc["rows"] += _dashboard_real(cfg, ns, common, tree, state_dir)
                    with Executor(ns.name) as ex:
                        ex.remove(plan.teardown())  # now, not during the next measurement
                    last = n
                if outdir:
                    save(doc, outdir)
        if cfg.dashboard_links and last is not None:
            doc["rows"] += _dashboard_synthetic(cfg, tree, steps)
            if outdir:
                save(doc, outdir)
    finally:
        if old_state is None:
            os.environ.pop("RATELIMIT_STATE_DIR", None)
        else:
            os.environ["RATELIMIT_STATE_DIR"] = old_state
        shutil.rmtree(state_dir, ignore_errors=True)
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)
    if place == "vm":
        doc["notes"].append("police mode measured in the full-kernel VM under software emulation (TCG): "
                            "compare ratios, not seconds")
    doc["notes"].append("dashboard rows: the server process's CPU time (user + system) over the window, as a share "
                        "of one core, one headless Chromium page open (without Playwright: a client reading the "
                        "live stream); real counters are of idle links")
    return doc


def _save_v1(state_files, req, state_dir: str) -> None:
    """The record as the baseline revision reads it (version 1: the bare request), in a
    directory of its own (``_v1``); this checkout reads its own version-2 record."""
    path = Path(state_dir, "v1", state_files.record_path(req.netns, req.interface).relative_to(state_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = state_files.to_json(req)
    data.update({k: v for k, v in data.pop("cohorts")[0].items() if k != "name"})  # the request before cohorts
    path.write_text(json.dumps(data))


def _v1(state_dir: str) -> str:
    return str(Path(state_dir, "v1"))


def _read_side_by_side(cfg, ns, plan, tc_what, common, tree, state_dir, readout, Executor, steps) -> list:
    from ratelimit.plan.compile import compiled
    interface, netns = plan.request.interface, plan.request.netns
    readout.link_table.cache_clear()
    compiled.cache_clear()
    cold = _timed(lambda: readout.statistics(interface, netns))
    if len(cold["out"]["links"]) != len(plan.flows):
        raise BenchError(f"service.statistics returned {len(cold['out']['links'])} rows for {len(plan.flows)} links")
    poller = readout.Poller()
    base = dashboard.BaselineStats(tree, netns, interface, {"RATELIMIT_STATE_DIR": _v1(state_dir)}) if tree else None
    tools = {
        "ratelimit": lambda: _timed(lambda: _executor_stats(Executor, netns, plan)),
        "service.statistics": lambda: _timed(lambda: readout.statistics(interface, netns)),
        "service.Poller": lambda: _timed(lambda: poller(interface, netns)),
        f"tc -s {tc_what} show": lambda: _timed(lambda: _tc(ns, tc_what, plan.devices())),
        CLI_STATS: lambda: _cli_stats(interface, netns),
    }
    if base is not None:
        tools["baseline service.statistics"] = base
    got: dict = {name: ([], []) for name in tools}
    try:
        names = list(tools)
        for r in range(cfg.repeats):
            for name in (names if r % 2 == 0 else names[::-1]):
                m = tools[name]()
                got[name][0].append(m["wall_s"])
                got[name][1].append(m["cpu_s"])
                if name == "ratelimit" and m["out"] != len(plan.flows):
                    raise BenchError(f"Executor.stats returned {m['out']} rows for {len(plan.flows)} flows")
                if name == CLI_STATS and m["out"] != len(plan.flows):
                    raise BenchError(f"{CLI_STATS} printed {m['out']} links of {len(plan.flows)}")
                if name == "baseline service.statistics" and m["links"] != len(plan.flows):
                    raise BenchError(f"the baseline read {m['links']} links of {len(plan.flows)}")
    finally:
        poller.close()
        if base is not None:
            base.close()
    rows = [_row(common, "service.statistics cold", [cold["wall_s"]], [cold["cpu_s"]])]
    for name, (walls, cpus) in got.items():
        extra = {"rows": len(plan.flows)} if name == "ratelimit" else {}
        if name.startswith("tc "):
            extra = {"output_bytes": _tc(ns, tc_what, plan.devices())}
        rows.append(_row(common, name, walls, cpus, **extra))
    by = {r["tool"]: r["seconds"] for r in rows}
    tc_name = f"tc -s {tc_what} show"
    text = (f"{common['mode']} {common['flows']:,} links: Executor.stats {fmt_time(by['ratelimit'])}, "
            f"service.statistics {fmt_time(by['service.statistics'])} (cold {fmt_time(by['service.statistics cold'])}),"
            f" Poller {fmt_time(by['service.Poller'])}, {tc_name} {fmt_time(by[tc_name])}")
    if "baseline service.statistics" in by:
        text += (f", baseline {fmt_time(by['baseline service.statistics'])} (baseline / ours = "
                 f"{ratio(by['baseline service.statistics'], by['service.statistics']):.1f})")
    text += f", {CLI_STATS} {fmt_time(by[CLI_STATS])} (a whole process)"
    steps(text + f"; best of {cfg.repeats}")
    return rows


CLI_STATS = "ratelimit --stats --json"


def _cli_stats(interface: str, netns: str) -> dict:
    """``ratelimit --stats --json`` as a user or a script polling it runs it: a whole process
    (start, the record, the link table, the dumps, the JSON), its wall and CPU time."""
    res = _timed(lambda: subprocess.run([sys.executable, "-m", "ratelimit", "--netns", netns, "--if", interface,
                                         "--stats", "--json"], capture_output=True, text=True, cwd=REPO))
    done = res.pop("out")
    if done.returncode:
        raise BenchError(f"{CLI_STATS}: exit {done.returncode}: {done.stderr.strip()}")
    return {**res, "out": len(json.loads(done.stdout)["links"])}


def _executor_stats(Executor, netns, plan) -> int:
    with Executor(netns) as ex:
        return len(ex.stats(plan))


def _dashboard_rows(common: dict, source: str, results: dict) -> list:
    rows = []
    for who, shares in results.items():
        rows.append({**common, "tool": f"dashboard ({who})", "source": source, "core_share": min(shares),
                     "core_share_median": median(shares), "samples": shares, "seconds": None})
    return rows


def _measure_servers(cfg, servers: dict) -> dict:
    """{who: [core share per round]}, the servers alternating, one browser for all."""
    client = dashboard.browser()
    try:
        out: dict = {who: [] for who in servers}
        names = list(servers)
        for r in range(cfg.dashboard_rounds):
            for who in (names if r % 2 == 0 else names[::-1]):
                argv, env = servers[who]
                m = dashboard.server_cpu(argv, env, client, warmup_s=3.0, window_s=cfg.dashboard_window_s)
                out[who].append(m["core_share"])
        out["_browser"] = client.real
        return out
    finally:
        client.close()


def _dashboard_real(cfg, ns, common, tree, state_dir) -> list:
    from .common import REPO
    iface = DEV
    servers = {"this checkout": (dashboard.webui_argv(ns.name, iface),
                                 dashboard.env_for(REPO, RATELIMIT_STATE_DIR=state_dir))}
    if tree is not None:
        servers["baseline"] = (dashboard.webui_argv(ns.name, iface), dashboard.env_for(tree, RATELIMIT_STATE_DIR=_v1(state_dir)))
    got = _measure_servers(cfg, servers)
    real = got.pop("_browser")
    say(NAME, f"dashboard, kernel counters of {common['flows']:,} idle links, one {'browser' if real else 'stream'}: "
              + ", ".join(f"{who} {min(v):.1%} of a core" for who, v in got.items()))
    return _dashboard_rows({**common, "browser": real}, "kernel", got)


def _dashboard_synthetic(cfg, tree, steps) -> list:
    from .common import REPO
    rows = []
    for links in cfg.dashboard_links:
        servers = {"this checkout": (dashboard.synthetic_argv(links, "columns"), dashboard.env_for(REPO))}
        if tree is not None:
            servers["baseline"] = (dashboard.synthetic_argv(links, "rows"), dashboard.env_for(tree))
        got = _measure_servers(cfg, servers)
        real = got.pop("_browser")
        common = {"mode": "synthetic", "flows": links, "requested_flows": links, "browser": real}
        rows += _dashboard_rows(common, "synthetic", got)
        steps(f"dashboard, {links:,} synthetic links all moving, one {'browser' if real else 'stream'}: "
              + ", ".join(f"{who} {min(v):.1%} of a core" for who, v in got.items()))
    return rows


def main(args) -> int:
    from .sandbox import load_modules, run_vm_part
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    if in_vm():
        load_modules()
        save(measure(args.quick, "vm", flows=args.flows, outdir=outdir, baseline=None), outdir)
        return 0
    rev = getattr(args, "baseline", None) or BASELINE
    doc = measure(args.quick, "host", flows=args.flows, outdir=outdir, baseline=None if rev == "none" else rev,
                  dashboard_links=getattr(args, "dashboard_links", None))
    say(NAME, f"wrote {save(doc, outdir)}")
    if args.vm and "police" not in doc["config"]["modes"]:
        fwd = (["--quick"] if args.quick else []) + (["--flows", *map(str, args.flows)] if args.flows else [])
        rc = run_vm_part(NAME, fwd, outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0
