"""A staged plan in the kernel and in the record: built beside the installed plan, where no
packet reaches it (``build``), and taken away again (``take_away``), each whole or not at
all; and the repair of a stage or abort that was killed (``repair``).

The record of a staged interface names both requests (``records.Record.staged``) and
fingerprints both plans' parts together.  The switch a stage builds is worked out again
from the two requests (``diff.staging``), so an abort, a commit or a repair needs nothing
else.  Why a fleet stages: ``docs/fleet.md``.
"""

from ..errors import ApplyError, Interrupted, StateError, one_line
from ..plan import diff
from ..plan.compile import compile_plan
from . import fingerprint, records, signals
from .installed import executor


def _record(ex, old, staged=None, build=()) -> None:
    """Record ``old`` (the installed plan, or None) and ``staged`` (built by ``build``) as
    the kernel now holds them; with neither, forget the interface."""
    if old is None and staged is None:
        return
    plans = [p for p in (old, staged) if p is not None]
    devices = list(dict.fromkeys(dev for p in plans for dev in p.devices()))
    owned = fingerprint.of_ops((old.ops if old else ()) + tuple(build))
    records.save(old.request if old else None, fingerprint.of_kernel(owned, ex.picture(devices)),
                 staged=staged.request if staged else None)


def record_alone(ex, netns, interface, old) -> None:
    """Record ``old`` (the installed plan) with nothing staged; None: forget the interface."""
    if old is None:
        records.forget(netns, interface)
    else:
        _record(ex, old)


def _remove(ex, netns, interface, old, switch) -> None:
    """Remove a stage's parts (``switch.undo_removal``: what it built, never the installed
    plan's) and record ``old`` alone."""
    ex.remove(switch.undo_removal)
    record_alone(ex, netns, interface, old)


def build(ex, netns, interface, old, new, switch, *, progress=None, echo=None) -> None:
    """Build ``switch.build`` (``diff.staging(old, new)``) and record ``new`` as staged.
    On a refusal, an exception, SIGINT or SIGTERM what was built is removed again
    (``diff.unbuilt``: the parts the kernel refused are someone else's) and the record is as
    before: the installed plan carried every packet throughout."""
    records.write_marker(netns, interface, "stage", old=old.request if old else None, new=new.request)
    with signals.guard(armed=False) as guard:
        try:
            guard.arm()
            ex.apply(switch.build, progress=progress, echo=echo)
            guard.hold()
            _record(ex, old, new, switch.build)
        except BaseException as err:
            guard.hold()
            what = f"interrupted by {err.name} during the stage" if isinstance(err, signals.Stop) else one_line(err)
            refused = frozenset(getattr(err, "refused", ()))  # a kernel refusal: not its parts to remove
            try:
                with executor(netns) as fresh:  # the old socket may hold half an exchange
                    fresh.remove(diff.unbuilt(old, switch, refused))
                    record_alone(fresh, netns, interface, old)
            except BaseException as again:
                raise StateError(f"{what}; removing what was staged failed too ({one_line(again)}); the installed "
                                 f"plan still carries traffic; to remove the rest: ratelimit --abort "
                                 f"--interface {interface}{_ns(netns)}") from err
            finally:
                records.clear_marker(netns, interface)
            back = f"nothing is staged on {interface}, and the installed plan carries traffic as before"
            if isinstance(err, (signals.Stop, KeyboardInterrupt)):
                raise Interrupted(f"{what}; {back}", getattr(err, "signum", 2)) from None
            raise ApplyError(f"{what}; {back}") from (None if isinstance(err, ApplyError) else err)
    records.clear_marker(netns, interface)


def take_away(ex, netns, interface, old, staged) -> None:
    """Remove the staged plan ``staged`` from beside ``old`` and record ``old`` alone; a run
    killed meanwhile is finished by ``repair``."""
    records.write_marker(netns, interface, "abort", old=old.request if old else None, new=staged.request)
    with signals.guard(armed=False):
        _remove(ex, netns, interface, old, _switch(old, staged))
    records.clear_marker(netns, interface)


def _switch(old, staged):
    switch = diff.staging(old, staged)
    if switch is None:  # a record this ratelimit did not write: the stage's teardown is all there is
        return diff.Switch((), (), (), (), (), staged.teardown(), ())
    return switch


def repair(ex, netns, interface, marker: dict, notice) -> bool:
    """Finish a stage or abort that was killed (its ``marker``): a stage that had recorded
    its plan stays; otherwise what it built is removed.  True when the marker was one of
    these (and is gone)."""
    if marker["action"] not in ("stage", "abort"):
        return False
    where = f"marker {records.marker_path(netns, interface)}"
    old = compile_plan(records.request_from_json(marker["old"], where)) if marker.get("old") else None
    new = compile_plan(records.request_from_json(marker["new"], where))
    if marker["action"] == "stage" and _completed(ex, netns, interface, new):
        records.clear_marker(netns, interface)
        return True
    _remove(ex, netns, interface, old, _switch(old, new))
    records.clear_marker(netns, interface)
    what = "mid-stage" if marker["action"] == "stage" else "mid-abort"
    notice(f"{interface}: a ratelimit run (pid {marker.get('pid')}) was killed {what}; removed what it had staged "
           "(the installed plan carries traffic as before)")
    return True


def _completed(ex, netns, interface, new) -> bool:
    try:
        record = records.load(netns, interface)
    except StateError:
        return False
    if record is None or record.staged != new.request or not record.fingerprint:
        return False
    return not fingerprint.differences(record.fingerprint, ex.picture(list(record.fingerprint)))


def _ns(netns) -> str:
    return f" --netns {netns}" if netns else ""
