"""``python -m bench PART [--quick]``: run ratelimit's benchmarks.

    python -m bench all [--quick]        every part, then the report
    python -m bench setup [--quick]      setup time vs flows
    python -m bench packet [--quick]     per-packet cost vs flows (hashed vs flat)
    python -m bench stats [--quick]      time to read every link's counters; dashboard CPU
    python -m bench metrics [--quick]    a /metrics scrape: hand-written writer vs prometheus_client
    python -m bench fidelity [--quick]   goodput / configured, RTT / configured
    python -m bench dialup [--quick]     the 2000 dial-up table with httperf and wrk (wrk also at 15,000, 20,000)
    python -m bench audience [--quick]   the dial-up table's method behind a mix of links
    python -m bench faults [--quick]     refusals at every step, SIGKILL mid-apply
    python -m bench switch [--quick]     a download across a profile switch: in place vs rebuild
    python -m bench cohorts [--quick]    16 cohorts vs one (setup, per packet); whole hosts vs per port
    python -m bench cells [--quick]      users in cells vs the same links without (setup, sharing, CPU)
    python -m bench shaped-load [--quick] [--queues Q ...]  K backlogged links through the router: 1 tx queue vs 2
    python -m bench trace [--quick]      100-10,000 links following a cellular trace; the driver vs tc per link
    python -m bench qdisc-hash [--quick] installs and class changes: the groups in a hash bucket of their own vs slot order
    python -m bench soak [--minutes N]   the dashboard's memory over an hour under load (not in all)
    python -m bench fleet                10,008 links over three routers by Ansible vs one router alone (not in all)
    python -m bench report               docs/benchmarks.md from bench/results/

Parts that need netem or act_police (police mode, latency classes) run that
share inside the full-kernel VM (``ratelimit.kernel.vm``) unless ``--no-vm``; ``all``
boots the VM once for all of them.  Needs root.  Exit status: 0 done, 1 a part
failed, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

from . import common, results, sandbox

PARTS = ("setup", "packet", "stats", "metrics", "fidelity", "dialup", "audience", "faults", "switch", "cohorts",
         "shaped-load", "trace", "qdisc-hash", "cells")
SOLO = ("soak", "fleet")  # run on their own only, not part of ``all``: an hour; ansible-core and sshd


_MODULES = {"setup": "setup_time", "packet": "packet", "stats": "stats_cost", "metrics": "metrics_cost",
            "fidelity": "fidelity", "dialup": "dialup", "audience": "audience", "faults": "faults", "switch": "switch",
            "cohorts": "cohorts", "shaped-load": "shaped_load", "trace": "trace", "qdisc-hash": "qdisc_hash",
            "soak": "soak", "fleet": "fleet", "cells": "cells"}


def _module(part: str):
    import importlib
    return importlib.import_module(f"bench.{_MODULES[part]}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Results: bench/results/*.json; report: docs/benchmarks.md")
    p.add_argument("part", choices=("all", *PARTS, *SOLO, "report"), help="what to run")
    p.add_argument("--quick", action="store_true",
                   help="small sizes, a minute or two in all (what CI runs)")
    p.add_argument("--no-vm", dest="vm", action="store_false",
                   help="skip the parts that need the full-kernel VM (police mode, netem)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help=f"results directory (default {results.RESULTS_DIR})")
    p.add_argument("--flows", type=int, nargs="+", metavar="N",
                   help="flow counts (setup, packet, stats) or link counts (metrics, shaped-load, qdisc-hash) instead of "
                        "the defaults")
    p.add_argument("--queues", type=int, nargs="+", metavar="Q",
                   help="shaped-load: tx queue counts, each measured beside the others (default 1 2)")
    p.add_argument("--clients", type=int, nargs="+", metavar="X",
                   help="simultaneous connections (dialup: only these x, httperf where a client's share fits one "
                        "process, in a lab with wider client port ranges where they need it; audience: the dial-up "
                        "mix only) or downloads (fidelity) instead of the defaults")
    p.add_argument("--dashboard-links", type=int, nargs="+", metavar="N",
                   help="stats: link counts of the synthetic dashboard measurement (0: none) instead of the defaults")
    p.add_argument("--baseline", default=None, metavar="REV",
                   help="stats: the git revision measured beside this checkout (default: the commit before "
                        "statistics were rebuilt for scale; 'none' for no baseline)")
    p.add_argument("--minutes", type=float, default=None, metavar="N",
                   help="soak: how long to run (default 60, 3 with --quick)")
    p.add_argument("--report-from", choices=("any", "full", "quick"), default="any",
                   help="report: which results to use (default: full where present, else quick)")
    p.add_argument("--in-vm", action="store_true", help=argparse.SUPPRESS)
    return p


def _run_part(part: str, args) -> bool:
    t0 = time.monotonic()
    try:
        _module(part).main(args)
    except (common.BenchError, OSError) as e:
        common.say(part, f"FAILED: {e}")
        return False
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - report and go on with the next part
        common.say(part, "FAILED with a traceback:")
        traceback.print_exc()
        return False
    finally:
        sandbox.cleanup_all()
    common.say(part, f"done in {time.monotonic() - t0:.0f} s")
    return True


def _report(args) -> None:
    from . import report
    quick = {"any": None, "full": False, "quick": True}[args.report_from]
    path = report.write(args.out or results.RESULTS_DIR, quick=quick)
    common.say("report", f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sandbox.install_signal_handlers()
    if args.part == "report":
        _report(args)
        return 0
    if sandbox.in_vm():
        args.vm = False
    found = sandbox.remove_leftovers()
    if found:
        common.say(args.part, f"removed namespaces left by killed runs: {', '.join(found)}")
    ok = True
    if args.part == "all":
        vm_wanted = args.vm
        args.vm = False  # one VM boot for every part, below
        for part in PARTS:
            if sandbox.in_vm() and not getattr(_module(part), "VM_WORK", False):
                continue
            ok &= _run_part(part, args)
        if vm_wanted and not sandbox.in_vm():
            fwd = ["--quick"] if args.quick else []
            try:
                ok &= sandbox.run_vm_part("all", fwd, outdir=args.out or results.RESULTS_DIR,
                                         timeout_s=1800 if args.quick else 4 * 3600) == 0
            except Exception as e:  # noqa: BLE001
                common.say("all", f"the VM parts could not run: {e}")
                ok = False
        if not sandbox.in_vm():
            _report(args)
    else:
        ok = _run_part(args.part, args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
