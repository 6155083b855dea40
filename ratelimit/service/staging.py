"""stage / commit / abort: an apply in two steps, so that a fleet of routers can switch
together or not at all (``docs/fleet.md``; the design: ``docs/design.md``, "Staging").

1. ``stage`` builds the new plan beside the installed one and checks it with the kernel.
   No packet reaches it: its root filters (or queue programs) are not there yet.  It is
   recorded, so it outlives the process, and ``--list`` names it.
2. ``commit`` sends the rest: the kept links' new numbers, the old links held still, the
   root filters (one kernel step per device and protocol moves every flow), then the old
   plan's removal.  It is ``apply``'s make-before-break switch, minus what the stage built.
3. ``abort`` removes the staged plan; the installed plan never stopped carrying traffic.

A stage over a plan of other devices, direction, tx queues or link layer, or one that
does not fit beside the installed plan in the handles, is refused in one line: such an
apply rebuilds, which cannot be staged.  An apply while a plan is staged is refused too.

    >>> stage(request_of(Options(interface="eth1", hosts="198.18.1.1", ports="80")))  # doctest: +SKIP
    >>> commit("eth1")  # doctest: +SKIP
"""

import dataclasses
import time

from ..errors import ApplyError, Interrupted, NotFoundError, UsageError
from ..plan import diff, layout, placement
from ..plan.compile import compile_plan
from ..spec.model import Request
from ..spec.names import check_target
from ..state import recovery, records, staged
from ..state.installed import check_interface, executor, find_installed
from ..traces import tracespec
from ..driver import follow as driver
from .actions import check_kernel, check_queues, not_beside, refuse_foreign, rejects, require_root


def stage(req: Request, *, progress=None, echo=None, on_wait=None, lock_timeout=None, notice=None):
    """Build ``req``'s plan beside the installed one (see the module doc); returns the plan
    staged, with ``how`` "staged" (``changed``: the operations sent) or "already staged"
    (the same plan was: nothing sent), or the installed plan with ``how`` "unchanged" (it is
    ``req``'s: nothing to stage, and a stage there was is removed).  A different staged plan
    is removed first."""
    if req.lasting_ms is not None:
        raise UsageError("--for: not with --stage (a plan that ends by itself starts at its apply; apply it, or "
                         "stage it without --for)")
    plan = compile_plan(req)
    require_root()
    warning = layout.oversubscribed(req)
    if warning:
        (notice or recovery.notice_to_stderr)(warning)
    with executor(req.netns) as ex, records.lock(req.netns, req.interface, on_wait, lock_timeout):
        check_interface(ex, req, req.netns)
        check_queues(ex, req)
        recovery.repair(ex, req.netns, req.interface, notice)
        installed = find_installed(ex, req.netns, req.interface, force=False)
        refuse_foreign(plan, installed.foreign(req.interface), installed)
        check_kernel(plan)
        if installed.stale:
            records.forget(req.netns, req.interface)
        old = installed.plan
        if old is not None:
            same, changes, _ = placement.over(old, plan)
            if changes == ():  # the installed plan is this one: nothing to stage, and no other stage
                if installed.staged is not None:
                    staged.take_away(ex, req.netns, req.interface, old, installed.staged_plan)
                return dataclasses.replace(same, changed=(), how="unchanged")
        placed = placement.staged(old, plan)
        if placed is None:
            raise not_beside(req, old)
        if installed.staged is not None:
            if installed.staged == placed.request:
                return dataclasses.replace(placed, changed=(), how="already staged")
            staged.take_away(ex, req.netns, req.interface, old, installed.staged_plan)
        switch = diff.staging(old, placed)
        staged.build(ex, req.netns, req.interface, old, placed, switch, progress=progress, echo=echo)
    return dataclasses.replace(placed, changed=switch.build, how="staged")


def commit(interface: str, netns: str | None = None, *, progress=None, echo=None, lock_timeout=None, notice=None,
           follow: bool = True):
    """Switch to the plan staged on ``interface`` and remove the old one; returns the plan
    now installed (``how`` "committed", ``changed``: the operations sent).  On a refusal,
    an exception, SIGINT or SIGTERM the installed plan is back as it was and the stage is
    gone (``recovery.Transaction``).  NotFoundError when nothing is staged."""
    interface, netns = check_target(interface, netns)
    require_root()
    with executor(netns) as ex, records.lock(netns, interface, timeout=lock_timeout):
        check_interface(ex, interface, netns)
        recovery.repair(ex, netns, interface, notice)
        installed = find_installed(ex, netns, interface, force=False)
        if installed.staged is None:
            raise NotFoundError(f"--commit: nothing is staged on {interface} (stage a plan with --stage)")
        old = installed.plan
        new = installed.staged_plan
        new = dataclasses.replace(new, request=tracespec.stamped(new.request, installed.request,
                                                                 int(time.time() * 1000)))  # traces start now
        switch = diff.staging(old, new).commit
        change = recovery.Transaction(ex, netns, interface, old=old, new=new)
        try:
            with rejects(new.request, None if old is None else old.request, echo):  # a reject starts, or ends, at the commit
                change.run((), progress=progress, echo=echo, switch=switch)
        except (ApplyError, Interrupted):
            with executor(netns) as fresh:  # the old plan is back and the stage is gone: the record says so
                staged.record_alone(fresh, netns, interface, old)
            raise
    if follow and driver.traced(new.request):
        driver.start(netns, interface)
    return dataclasses.replace(new, changed=switch.ops(), how="committed")


def abort(interface: str, netns: str | None = None, *, lock_timeout=None, notice=None) -> Request | None:
    """Remove the plan staged on ``interface``; returns its request, None when nothing was
    staged.  The installed plan carried every packet throughout."""
    interface, netns = check_target(interface, netns)
    require_root()
    with executor(netns) as ex, records.lock(netns, interface, timeout=lock_timeout):
        check_interface(ex, interface, netns)
        recovery.repair(ex, netns, interface, notice)
        installed = find_installed(ex, netns, interface, force=False)
        if installed.staged is None:
            return None
        staged.take_away(ex, netns, interface, installed.plan, installed.staged_plan)
        return installed.staged
