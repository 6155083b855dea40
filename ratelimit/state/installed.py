"""What is on an interface, as far as ratelimit is concerned: the record, checked against
the kernel before anything trusts it (``find_installed``), and the parts that are not ratelimit's
(``Installed.foreign``).  ``service`` (apply, clean) and ``readout`` (--list, --stats, the
dashboard) both start here.
"""

from dataclasses import dataclass

from ..errors import ConflictError, NotFoundError, StateError
from ..plan.compile import compiled, ifb_name
from . import fingerprint, records


def executor(netns):
    """An ``Executor`` in ``netns``: the only code that changes traffic control.  Imported
    when first used, so that what never reaches the kernel (a dry run, a request's checks)
    does not load netlink (pyroute2: a fifth of a second here, seconds in the VM)."""
    from ..kernel.executor import Executor  # start-up time: see the docstring
    return Executor(netns)


def check_interface(ex, req_or_name, netns) -> None:
    name = getattr(req_or_name, "interface", req_or_name)
    if ex.link_index(name) is None:
        where = f" in namespace '{netns}'" if netns else ""
        raise NotFoundError(f"--interface: '{name}' does not exist{where} (see: ip link)")


@dataclass(frozen=True)
class Installed:
    """What is on an interface, as far as ratelimit is concerned."""

    request: object  # ratelimit's request, checked against the kernel; None if there is none
    owned: dict  # its fingerprint ({} without a plan)
    picture: dict  # the kernel's picture of the interface and its IFB device
    stale: bool = False  # a record whose parts are all gone from the kernel (nothing to delete)
    staged: object = None  # a request built beside ``request``, waiting for a commit (``service.staging``)

    @property
    def plan(self):
        """The request's plan, compiled when first asked for (reading statistics needs none)."""
        return None if self.request is None else compiled(self.request)

    @property
    def staged_plan(self):
        return None if self.staged is None else compiled(self.staged)

    def foreign(self, interface: str) -> dict:
        """The parts on the interface and its IFB device that are not ratelimit's."""
        out: dict = {}
        seen = self.picture.get(interface) or {}
        mine = self.owned.get(interface, {})
        for part in ("root", "ingress"):
            if seen.get(part) and part not in mine:
                out.setdefault(interface, set()).add(part)
        ifb = ifb_name(interface)
        if self.picture.get(ifb) is not None and ifb not in self.owned:
            out[ifb] = {"device"}
        return out


def find_installed(ex, netns, interface, *, force: bool, classes: bool = True) -> Installed:
    """Our plan on the interface, checked against the kernel before anything trusts it.

    A record that cannot be read, or one saying the interface is half-configured, is an
    error unless ``force`` (then it is ignored: everything there is replaced).  A record
    whose parts the kernel does not show as recorded (another tool's root qdisc with our
    handle, a class tree not ours) is refused unless ``force``; one whose parts are all
    gone is stale (nothing to delete).  A record of version 1 has no fingerprint: its plan
    is compiled to say what it owns; otherwise ``Installed.plan`` compiles when asked."""
    devs = [interface, ifb_name(interface)]
    try:
        record = records.load(netns, interface)
    except StateError:
        if not force:
            raise
        record = None
    if record is not None and record.problem:
        if not force:
            raise StateError(record.problem)
        record = None
    if record is None:
        return Installed(None, {}, ex.picture(devs, classes))
    owned = record.fingerprint or fingerprint.of_plan(compiled(record.request))  # version 1: what it should own
    picture = ex.picture(list(dict.fromkeys(devs + list(owned))), classes)
    differences = fingerprint.differences(owned, picture)
    if not differences:
        return Installed(record.request, owned, picture, staged=record.staged)
    if fingerprint.absent(owned, picture):
        return Installed(None, {}, picture, stale=True)
    if force:
        return Installed(None, {}, picture)
    raise ConflictError(f"--interface: {interface} does not hold what ratelimit recorded ({'; '.join(differences)}; "
                        f"record {records.record_path(netns, interface)}); nothing changed (use --force to replace "
                        "whatever is there)")
