"""Putting an interface back: after a change that failed or was interrupted, and after a
run that was killed mid-change.

``Transaction`` carries out the kernel part of an apply: it writes the marker (what to go
back to) before the first kernel change, stops on the first refusal, exception, SIGINT
or SIGTERM, and rolls back -- removes what either plan may have put there, re-applies the
plan that was there before, and sends back what ``--force`` replaced (``kernel.replay``)
-- then says truthfully where the interface is.  An apply that changed the installed plan
in place (``diff``) is undone by changing the old numbers back; only if that fails too is
the old plan rebuilt.  A rollback that itself fails records
the half-configured state (``records.save_problem``) and says, in one line, what the
interface holds now and the command that recovers it.

``repair`` runs first in every apply, clean, list and stats: a marker left behind means
a run was killed (SIGKILL, power loss of the process) mid-change.  An apply is rolled
back to the plan before it (or to nothing, or to what ``--force`` replaced); a clean is
finished; a stage or abort is finished by ``staged.repair``.  Either way the interface ends up as one whole plan or none, and the user is
told.
"""

import sys
import time

from ..errors import ApplyError, Interrupted, StateError, one_line
from ..plan.compile import compile_plan, ifb_name
from ..plan.ops import TC_H_INGRESS, TC_H_ROOT, DelLink, DelQdisc
from ..spec.summary import describe, summary
from . import fingerprint, records, signals, staged
from .installed import executor


def teardown_of(parts: dict) -> tuple:
    """The operations that remove ``parts`` ({dev: {"root", "ingress", "device"}})."""
    ops = []
    # the kernel deletes the qdisc at the ingress hook only when named by its kind: ingress
    # or clsact, whichever it is (the other's delete is refused as not there)
    for dev, want in parts.items():
        ingress = (DelQdisc(dev, TC_H_INGRESS), DelQdisc(dev, TC_H_INGRESS, "clsact"))
        if "device" in want:
            ops += [DelQdisc(dev, TC_H_ROOT), *ingress, DelLink(dev)]
            continue
        if "root" in want:
            ops.append(DelQdisc(dev, TC_H_ROOT))
        if "ingress" in want:
            ops += ingress
    return tuple(ops)


def everything(interface: str) -> dict:
    """Every part ratelimit may replace on ``interface``: root, ingress and its IFB device."""
    return {interface: {"root", "ingress"}, ifb_name(interface): {"device"}}


def union(*teardowns) -> tuple:
    """Teardown operations, each once, qdiscs before the devices they hang on go."""
    seen, ops = set(), []
    for op in (op for ops in teardowns for op in ops):
        if op not in seen:
            seen.add(op)
            ops.append(op)
    return tuple(sorted(ops, key=lambda op: isinstance(op, DelLink)))


def captured_parts(captured: dict | None) -> dict:
    return {dev: set(entry["parts"]) for dev, entry in (captured or {}).items() if entry.get("exists")}


def describe_request(req) -> str:
    return describe(summary(req))


def notice_to_stderr(message: str) -> None:
    print(f"ratelimit: {message}", file=sys.stderr)


def _now(netns, interface) -> str:
    """What the interface and its IFB device hold now, in a few words (never raises)."""
    try:
        with executor(netns) as ex:
            return fingerprint.describe(ex.picture([interface, ifb_name(interface)], classes=True))
    except Exception as err:  # the reason the kernel could not be read is the news
        return f"its state could not be read ({type(err).__name__}: {err})"


def _half_configured(netns, interface, req, what: str, err: BaseException) -> StateError:
    """Record and return the error for an interface left in neither plan."""
    problem = (f"{what}; putting {interface} back failed too ({one_line(err)}); {interface} is half-configured: "
               f"{_now(netns, interface)}; to recover: {records.recovery_command(netns, interface)}, then apply again")
    records.save_problem(netns, interface, req, problem)
    records.clear_marker(netns, interface)
    return StateError(problem)


def _put_back(ex, netns, interface, *, old, new, captured) -> list[str]:
    """Remove what ``new`` (and ``old``, and what ``--force`` replaced) may have put there,
    re-apply ``old`` and send back ``captured``; record the result.  Returns what of the
    captured configuration is not back (empty: all of it); raises if a kernel step fails."""
    ex.remove(union(new.teardown() if new else (), old.teardown() if old else (),
                     teardown_of(captured_parts(captured))))
    if old is not None:
        ex.apply(old.ops)
    problems = _restore(ex, captured) if captured else []
    if old is not None:
        records.save(old.request, fingerprint.of_kernel(fingerprint.of_plan(old), ex.picture(old.devices())))
    else:
        records.forget(netns, interface)
    return problems


# Waits before sending the captured configuration back again when it does not read back as
# it was: a deleted filter's actions leave the kernel's table only after a grace period (a
# work queue), and a captured action sent back with its index meanwhile is bound to the one
# still there -- a redirect to the removed IFB device, say -- instead of being made anew.
RESTORE_WAITS_S = (0.02, 0.1, 0.4, 1.0)


def _restore(ex, captured: dict) -> list[str]:
    """``ex.restore(captured)``, removed and sent again after each of ``RESTORE_WAITS_S``
    while the only problem is that it does not read back as it was."""
    from ..kernel.executor import NOT_AS_IT_WAS  # loaded with ``ex``; not at start-up (``installed.executor``)
    problems = ex.restore(captured)
    for wait in RESTORE_WAITS_S:
        if not problems or not all(p.endswith(NOT_AS_IT_WAS) for p in problems):
            break
        ex.remove(teardown_of(captured_parts(captured)))
        time.sleep(wait)
        problems = ex.restore(captured)
    return problems


def _not_restored(interface: str, problems: list[str]) -> str:
    more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
    return (f"what --force replaced on {interface} is not all back ({problems[0]}{more}); "
            f"re-create your own configuration there (see: tc qdisc show dev {interface})")


def _taking_back(undo, switch):
    """How to undo a change in place (``undo``: the old numbers back where they stand) or a
    switch (before the old plan's parts go: the new ones removed, the old numbers back);
    None when only rebuilding the old plan does."""
    if switch is not None:
        def take_back(ex):
            ex.apply(switch.undo_pins)
            ex.remove(switch.undo_removal)
            ex.apply(switch.undo_changes)
        return take_back
    if undo is not None:
        return lambda ex: ex.apply(undo)
    return None


class Transaction:
    """The kernel part of one apply, rolled back unless it completes (see the module doc)."""

    def __init__(self, ex, netns, interface, *, old, new, captured=None):
        self.ex, self.netns, self.interface = ex, netns, interface
        self.old, self.new, self.captured = old, new, captured

    def run(self, removal: tuple, *, progress=None, echo=None, changes=None, undo=None, switch=None) -> None:
        """Remove ``removal``, then apply the new plan -- or, given ``changes`` (``diff``),
        change the installed plan in place, ``undo`` changing it back if that fails; or,
        given a ``diff.Switch``, build the new plan beside the old and then remove the old
        (taken back if the building fails); on success record the new plan and drop the
        marker."""
        take_back = _taking_back(undo, switch)
        with signals.guard(armed=False) as guard:
            started = False
            try:
                guard.arm()
                records.write_marker(self.netns, self.interface, "apply", old=self.old.request if self.old else None,
                                   new=self.new.request, foreign=self.captured)
                started = True
                if switch is not None:
                    self.ex.apply(switch.adds, progress=progress, echo=echo)
                    take_back = None  # the old plan's parts are going: only rebuilding it takes this back
                    for op in switch.removal if echo else ():
                        echo(op.tc())
                    self.ex.remove(switch.removal)
                elif changes is None:
                    self.ex.remove(removal)
                    self.ex.apply(self.new.ops, progress=progress, echo=echo)
                else:
                    self.ex.apply(changes, progress=progress, echo=echo)
                guard.hold()
                picture = self.ex.picture(self.new.devices())
                records.save(self.new.request, fingerprint.of_kernel(fingerprint.of_plan(self.new), picture))
                records.clear_marker(self.netns, self.interface)
            except BaseException as err:
                guard.hold()
                if not started:  # nothing changed yet
                    records.clear_marker(self.netns, self.interface)
                    if isinstance(err, signals.Stop):
                        raise Interrupted(f"interrupted by {err.name}; nothing changed", err.signum) from None
                    raise
                self._roll_back(err, take_back)

    def _roll_back(self, err: BaseException, take_back=None):
        """Put the old plan back: ``take_back(ex)`` where it can undo the change, else (or
        if that fails) rebuild it."""
        if isinstance(err, signals.Stop):
            what = f"interrupted by {err.name} during the apply"
        else:
            what = one_line(err)
        try:
            with executor(self.netns) as ex:  # a fresh socket: the old one may hold half an exchange
                problems = None
                if take_back is not None:
                    try:  # the old plan back as it stands; the record still names it
                        take_back(ex)
                        problems = []
                    except ApplyError:
                        pass  # rebuilt below
                if problems is None:
                    problems = _put_back(ex, self.netns, self.interface, old=self.old, new=self.new,
                                         captured=self.captured)
        except BaseException as rb_err:
            raise _half_configured(self.netns, self.interface, self.old.request if self.old else None,
                                   what, rb_err) from err
        if problems:
            message = f"{what}; the new plan is removed, but {_not_restored(self.interface, problems)}"
            records.save_problem(self.netns, self.interface, None, message)
            records.clear_marker(self.netns, self.interface)
            raise StateError(message) from err
        records.clear_marker(self.netns, self.interface)
        back = f"{self.interface} is back as it was"
        if self.captured:
            back += " (what --force replaced is restored)"
        if isinstance(err, signals.Stop):
            raise Interrupted(f"{what}; {back}", err.signum) from None
        if isinstance(err, KeyboardInterrupt):
            raise Interrupted(f"interrupted during the apply; {back}") from None
        raise ApplyError(f"{what}; {back}") from (None if isinstance(err, ApplyError) else err)


def remove(ex, netns, interface, teardown: tuple, *, old=None, forced: bool = False) -> None:
    """A clean's kernel part: marker, removal, record; signals wait until it is done.  A
    removal the kernel refuses puts the installed plan back whole (a forced clean, which
    may have removed what is not ratelimit's, says where the interface stands instead)."""
    records.write_marker(netns, interface, "clean", old=old.request if old else None, new=None, forced=forced)
    with signals.guard(armed=False):
        try:
            ex.remove(teardown)
        except BaseException as err:
            what = f"clean failed ({one_line(err)})"
            if old is None or forced:
                raise _half_configured(netns, interface, None, what, err) from err
            try:
                with executor(netns) as fresh:
                    _put_back(fresh, netns, interface, old=old, new=None, captured=None)
            except BaseException as rb_err:
                raise _half_configured(netns, interface, old.request, what, rb_err) from err
            records.clear_marker(netns, interface)
            raise ApplyError(f"{what}; {interface} is back as it was") from None
        records.forget(netns, interface)
        records.clear_marker(netns, interface)


def repair(ex, netns, interface, notice=None) -> None:
    """Finish what a killed run left (its marker), before anything else reads or changes the
    interface; the caller holds the lock.  Says what it did through ``notice``."""
    marker = records.read_marker(netns, interface)
    if marker is None:
        return
    notice = notice or notice_to_stderr
    try:
        if staged.repair(ex, netns, interface, marker, notice):
            return
    except StateError:
        raise
    except Exception as err:
        raise _half_configured(netns, interface, None, f"a ratelimit run was killed mid-{marker['action']}",
                               err) from None
    where = f"marker {records.marker_path(netns, interface)}"
    try:
        old = records.request_from_json(marker["old"], where) if marker.get("old") else None
        new = records.request_from_json(marker["new"], where) if marker.get("new") else None
    except StateError as err:
        raise StateError(f"{err}; check the interface (tc qdisc show dev {interface}), then remove the file and "
                         f"run: {records.recovery_command(netns, interface)}") from None
    old_plan = compile_plan(old) if old else None
    new_plan = compile_plan(new) if new else None
    when = time.strftime("%H:%M:%S", time.localtime(marker.get("started", 0)))
    who = f"a ratelimit run (pid {marker.get('pid')}, {marker['action']} started {when})"
    foreign = marker.get("foreign")
    try:
        if marker["action"] == "clean":
            teardown = old_plan.teardown() if old_plan else ()
            if marker.get("forced"):
                teardown = union(teardown, teardown_of(everything(interface)))
            ex.remove(teardown)
            records.forget(netns, interface)
            records.clear_marker(netns, interface)
            notice(f"{interface}: {who} was killed mid-clean; finished it (nothing of ratelimit's is left)")
            return
        if _completed(ex, netns, interface, new_plan):
            records.clear_marker(netns, interface)
            return
        problems = _put_back(ex, netns, interface, old=old_plan, new=new_plan, captured=foreign)
    except Exception as err:
        raise _half_configured(netns, interface, old, f"{who} was killed mid-apply", err) from None
    if problems:
        message = f"{who} was killed mid-apply; its plan is removed, but {_not_restored(interface, problems)}"
        records.save_problem(netns, interface, None, message)
        records.clear_marker(netns, interface)
        raise StateError(message)
    records.clear_marker(netns, interface)
    before = f"the plan before it is back: {describe_request(old)}" if old else \
        "removed what it had added (nothing of ratelimit's was there before)"
    if foreign:
        before += "; what its --force replaced is restored"
    notice(f"{interface}: {who} was killed mid-apply; {before}")


def _completed(ex, netns, interface, new_plan) -> bool:
    """True when the killed apply had finished and recorded its plan (only the marker was left)."""
    try:
        record = records.load(netns, interface)
    except StateError:
        return False
    if record is None or record.problem or new_plan is None or record.request != new_plan.request:
        return False
    owned = record.fingerprint or fingerprint.of_plan(new_plan)
    return not fingerprint.differences(owned, ex.picture(list(owned)))
