"""Fault injection: a kernel refusal at every step of an apply, a change in place, a
make-before-break switch and a clean, and SIGKILL at random points of a large apply.

A refusal is real: before the k-th operation the executor sends (counting across the
calls one service call makes), ``inject`` slips in one the kernel refuses -- a class
under a qdisc that does not exist while building, the removal of the loopback device
while removing.  Within a batch the kernel carries on past the refused message, so the
operations after it in the same batch do take effect; that is the case to survive.
Each run is judged by the configuration dump (``dump``: every qdisc, class and filter
of the devices, counters aside, entries sorted because a hash dump's order is not
configuration): after a refusal it must equal the dump before the call, and the record
must still name the old plan.  A SIGKILL run is judged after the next command: the
dump must equal the old plan's or the new plan's.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

from .common import DEV, BenchError, say, Steps
from .results import new_result, save
from .sandbox import Netns

NAME = "faults"
VM_WORK = False
DEVS = (DEV, f"rl-{DEV}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_KERNEL_TABLE = re.compile(r"\b[89a-f][0-9a-f]{2}(?=:)|(?<=key ht )[89a-f][0-9a-f]{2}\b")
_ACTION_INDEX = re.compile(r"(?<=police )0x[0-9a-f]+|(?<=index )\d+")


def _kernel_index(match: re.Match) -> str:
    """An action index the kernel picked (below the ones ratelimit gives shared policers)
    as "auto": the kernel frees a deleted filter's actions only after a grace period, so
    one made again at once may get another number."""
    from ratelimit.plan.ops import SHARED_POLICE_INDEX_BASE
    text = match.group()
    return "auto" if int(text, 0) < SHARED_POLICE_INDEX_BASE else text


def kernel_numbers_named(filters: str) -> str:
    """``tc filter show`` output with the numbers the kernel picked named: root tables
    "root", action indexes "auto"."""
    return _ACTION_INDEX.sub(_kernel_index, _KERNEL_TABLE.sub("root", filters))


def _entries(text: str) -> list[str]:
    """``tc`` output as entries (a line and the indented lines under it), sorted."""
    out: list[str] = []
    for line in text.splitlines():
        if line[:1].isspace() and out:
            out[-1] += "\n" + line
        else:
            out.append(line)
    return sorted(out)


def dump(ns: str, devs=DEVS) -> list[str]:
    """What ``tc -d`` shows of ``devs``, counters aside: each part's entries sorted (the
    order of a dump follows the kernel's hash tables, which grow and never shrink), and
    the number the kernel gave each filter list's root table (800: and up, in the order
    the lists were made) written as "root", and action indexes the kernel picked written as
    "auto" (``_kernel_index``)."""
    def sh(*argv):
        return subprocess.run(argv, capture_output=True, text=True)
    out = []
    for dev in devs:
        if sh("ip", "-n", ns, "link", "show", "dev", dev).returncode:
            out.append(f"{dev}: absent")
            continue
        for what in (("qdisc", "show", "dev", dev), ("class", "show", "dev", dev),
                     ("filter", "show", "dev", dev), ("filter", "show", "dev", dev, "ingress")):
            text = re.sub(r"direct_packets_stat \d+", "", sh("tc", "-n", ns, "-d", *what).stdout)
            if what[0] == "filter":
                text = kernel_numbers_named(text)
            out.append("\n".join(_entries(text)))
    return out


@contextmanager
def inject(at: int | None):
    """Count the operations the executor carries out (``counted[0]``) and, when ``at`` is
    given, slip a refused one in before operation number ``at`` (once)."""
    from ratelimit.kernel.executor import Executor
    from ratelimit.plan.ops import DelLink
    from ratelimit.plan.shaping import HtbClass
    real_apply, real_remove = Executor.apply, Executor.remove
    counted = [0]

    def poisoned(ops, poison_for):
        ops = tuple(ops)
        k = at - counted[0] if at is not None else -1
        counted[0] += len(ops)
        if 0 <= k < len(ops):
            return ops[:k] + (poison_for(ops[k]),) + ops[k:]
        return ops

    def apply(self, ops, **kw):
        return real_apply(self, poisoned(ops, lambda op: HtbClass(
            getattr(op, "dev", DEV), 0xDEAD0001, 0xDEAD0002, 8000, 8000, 1514, 1514)), **kw)

    def remove(self, ops):
        return real_remove(self, poisoned(ops, lambda op: DelLink("lo")))

    Executor.apply, Executor.remove = apply, remove
    try:
        yield counted
    finally:
        Executor.apply, Executor.remove = real_apply, real_remove


def request(ns: str, **kw):
    from ratelimit.profiles import scenario
    from ratelimit import service
    if "cohorts" in kw:  # a plan of two cohorts: the second's ports and rate as given
        ports, rate = kw["cohorts"]
        text = ("[cohort.steady]\ndescription = 'the cohort left alone'\nhosts = '198.18.1.2,2001:db8::2'\n"
                "ports = '5000-5003'\nper = 'port'\nrate = '1mbit'\nqueue = '20kb'\n"
                "[cohort.changing]\ndescription = 'the cohort that changes'\nhosts = '198.18.1.3'\n"
                f"ports = '{ports}'\nper = 'port'\nrate = '{rate}'\nqueue = '20kb'\n")
        return service.make_request(DEV, netns=ns, scenario=scenario.parse(text), mode="shape", direction="both")
    args = dict(hosts="198.18.1.2,2001:db8::2", ports="5000-5003", mode="shape", direction="both", rate="1mbit",
                queue="20kb")
    args.update(kw)
    return service.make_request(DEV, netns=ns, **args)


@dataclass(frozen=True)
class Case:
    """One kind of call: what is installed before (None: nothing), and the call."""

    name: str
    before: dict | None
    after: dict | None  # None: a clean
    how: str  # what the call must report when it runs clean ("built", "in place", ...)


CASES = (
    Case("apply on a clean interface", None, {}, "built"),
    Case("apply over a plan, rebuilt (another link layer)", {}, {"link": "atm"}, "built"),
    Case("change in place (new rate and queue)", {}, {"rate": "2mbit", "queue": "40kb"}, "in place"),
    Case("make-before-break (other ports and hosts)", {}, {"hosts": "198.18.1.3", "ports": "5002-5009"},
         "make-before-break"),
    Case("make-before-break back to the first handles", {"ports": "6000-6003", "_second": True}, {},
         "make-before-break"),
    Case("one cohort of two changed in place", {"cohorts": ("6000-6003", "1mbit")},
         {"cohorts": ("6000-6003", "2mbit")}, "in place"),
    Case("one cohort of two grows: built beside, the other kept", {"cohorts": ("6000-6003", "1mbit")},
         {"cohorts": ("6000-6009", "1mbit")}, "make-before-break"),
    Case("clean", {}, None, "clean"),
)


def _install(ns, spec) -> None:
    """Put the case's plan before the call on the interface (None: nothing)."""
    from ratelimit import service
    if spec is None:
        return
    spec = dict(spec)
    if spec.pop("_second", False):  # installed by a switch: the plan in the second generation of handles
        service.apply(request(ns, ports="7000-7003"))
    service.apply(request(ns, **spec))


def _call(ns, case):
    from ratelimit import service
    if case.after is None:
        service.clean(DEV, ns)
        return "clean"
    return service.apply(request(ns, **case.after)).how


def _first_difference(before: list[str], after: list[str]) -> str:
    """The first line of one dump the other lacks, for the results file."""
    for old, new in zip(before, after):
        gone, came = set(old.splitlines()) - set(new.splitlines()), set(new.splitlines()) - set(old.splitlines())
        if gone or came:
            return f"{len(gone)} lines gone (first: {min(gone, default='-')!r}), " \
                   f"{len(came)} came (first: {min(came, default='-')!r})"
    return "another number of parts"


def sweep(ns: str, case: Case) -> dict:
    """The call once clean (counting its operations), then once per operation with a
    refusal before it; returns counts and the positions that did not leave the dump and
    the record as before."""
    from ratelimit import service
    from ratelimit.state import records
    from ratelimit.errors import RatelimitError
    service.clean(DEV, ns, force=True)
    _install(ns, case.before)
    with inject(None) as counted:
        how = _call(ns, case)
    if how != case.how:
        raise AssertionError(f"{case.name}: went {how!r}, not {case.how!r}")
    total = counted[0]
    bad = []
    for k in range(total):
        service.clean(DEV, ns, force=True)
        _install(ns, case.before)
        before, record = dump(ns), records.load(ns, DEV)
        try:
            with inject(k):
                _call(ns, case)
        except RatelimitError as err:
            message = str(err)
        else:
            bad.append((k, "the refusal went unnoticed"))
            continue
        after, now = dump(ns), records.load(ns, DEV)
        if after != before:
            bad.append((k, f"the dump changed ({message}): {_first_difference(before, after)}"))
        elif (now.request if now else None) != (record.request if record else None):
            bad.append((k, f"the record changed ({message})"))
        elif "back as it was" not in message:
            bad.append((k, f"said: {message}"))
    service.clean(DEV, ns, force=True)
    return {"case": case.name, "operations": total, "refusals": total, "bad": bad}


BIG = ["-h", "198.18.1.2,198.18.1.3,198.18.1.4", "-p", "10000-17999", "--mode", "shape", "-d", "dest",
       "-r", "100kbit"]  # 24,000 links: a few seconds to apply
NEXT = (["--list"], ["--stats"], ["-h", "198.18.1.2", "-p", "5000", "--mode", "shape", "-r", "1mbit"], ["--clean"])


def _cli(ns, *argv, **kw):
    return subprocess.Popen([sys.executable, "-m", "ratelimit", "--netns", ns, "--if", DEV, *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def kills(ns: str, n: int, seed: int = 1) -> list[dict]:
    """SIGKILL a 24,000-link apply (over a small plan, or on a clean interface) at ``n``
    random moments within the time such an apply took, then run a random next command:
    after it the dump must be the old plan's or the new plan's (--list, --stats), nothing
    (--clean) or the next apply's plan.  The new plan over a small one is built beside it,
    in the other generation of handles: its dump is its own, taken from a run to the end.
    A run that ended before its kill (the load changed) counts too (``finished_first``); the
    last row is one on purpose, over a plan, judged by ``--list``."""
    from ratelimit import service
    rng = random.Random(seed)
    small = ["-h", "198.18.1.9", "-p", "6000-6009", "--mode", "shape", "-d", "dest", "-r", "1mbit"]

    def run(*argv):
        res = _cli(ns, *argv)
        out, err = res.communicate()
        if res.returncode:
            raise AssertionError(f"ratelimit {' '.join(argv)}: {err.strip()}")

    service.clean(DEV, ns, force=True)
    pristine = dump(ns)
    run(*small)
    dumps = {"small": dump(ns)}
    run(*NEXT[2])
    dumps["next apply"] = dump(ns)
    took_s = {}
    for over in (False, True):  # the new plan on a clean interface, and built beside the small one
        service.clean(DEV, ns)
        if over:
            run(*small)
        started = time.monotonic()
        run(*BIG)
        took_s[over] = time.monotonic() - started
        dumps[over] = dump(ns)  # over a plan, the new plan is whole in the other generation of handles
    def attempt(over: bool, at: float | None, nxt: list) -> dict:
        """One run killed ``at`` seconds in (None: once it has ended), then ``nxt``, judged."""
        service.clean(DEV, ns, force=True)
        if over:
            run(*small)
        old = dumps["small"] if over else pristine
        proc = _cli(ns, *BIG)
        if at is None:
            proc.wait()
        else:
            time.sleep(at)  # the kill's moment, drawn within this machine's own run time (took_s): the experiment
        finished_first = proc.poll() is not None  # under a changing load a run may end before its kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        res = _cli(ns, *nxt)
        _, err = res.communicate()
        after = dump(ns)
        if nxt == ["--clean"]:
            holds = "nothing" if after == pristine else "something"
            ok = holds == "nothing"
        elif nxt == NEXT[2]:
            holds = "the next apply's plan" if after == dumps["next apply"] else "something else"
            ok = res.returncode == 0 and after == dumps["next apply"]
        else:
            holds = "the old plan" if after == old else "the new plan" if after == dumps[over] else "a mix"
            ok = holds != "a mix"
        return {"kill_after_s": None if at is None else round(at, 3), "of_s": round(took_s[over], 3),
                "over_a_plan": over, "finished_first": finished_first, "next": " ".join(nxt),
                "next_exit": res.returncode, "holds": holds, "ok": ok, "said": err.strip()[-300:]}

    rows = []
    for _ in range(n):
        over = rng.random() < 0.5
        at = rng.uniform(0.05, took_s[over])
        rows.append(attempt(over, at, rng.choice(NEXT)))
    rows.append(attempt(True, None, NEXT[0]))  # a kill after the run ended: --list keeps the new plan
    service.clean(DEV, ns, force=True)
    return rows


def measure(quick: bool, outdir=None) -> dict:
    doc = new_result(NAME, quick)
    private = None
    if "RATELIMIT_STATE_DIR" not in os.environ:  # records of its own, not the machine's
        private = os.environ["RATELIMIT_STATE_DIR"] = f"/run/ratelimit-bench-{os.getpid()}"
    steps = Steps(NAME, len(CASES) + 1)
    try:
        with Netns("faults") as box:
            doc["sweeps"] = []
            for case in CASES:
                row = sweep(box.name, case)
                doc["sweeps"].append(row)
                steps(f"{case.name}: {row['operations']} operations, a refusal before each; "
                      f"{len(row['bad'])} left the interface otherwise than before")
            doc["kills"] = kills(box.name, 6 if quick else 24)
            steps(f"SIGKILL at {len(doc['kills']) - 1} random points and once after the run ended: "
                  f"{sum(1 for r in doc['kills'] if r['ok'])} left one whole plan (or none)")
    finally:
        if private:
            shutil.rmtree(private, ignore_errors=True)
            del os.environ["RATELIMIT_STATE_DIR"]
    if outdir:
        save(doc, outdir)
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    bad = sum(len(r["bad"]) for r in doc["sweeps"]) + sum(1 for r in doc["kills"] if not r["ok"])
    if bad:
        raise BenchError(f"{bad} faults left the interface in neither plan (see the results file)")
    return 0
