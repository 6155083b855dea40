"""What ratelimit owns on a device, as the kernel shows it: the check before anything is deleted.

Qdiscs and classes carry no owner mark, and a handle alone can collide with another
tool's (a user's ``htb 52:``).  So the state file records a *fingerprint* of the parts a
plan owns: per device its root qdisc (kind and handle) with a digest of its HTB classes
(handle, parent, kind), its ingress qdisc, and the IFB device's existence.  Before
ratelimit deletes anything it reads the same parts from the kernel (a *picture*,
``kernel.readback.Reader.picture``) and compares.  Pure: dicts in, dicts out.

A fingerprint: ``{dev: {"root": "htb 52:", "classes": [count, digest], "ingress": "ingress",
"device": true}}`` with only the parts the plan owns.  A picture: ``{dev: None}`` for a
missing device, else ``{"root": (kind, handle) | None, "ingress": kind | None,
"classes": [(classid, parent, kind), ...] | None}`` (None: not read).
"""

import hashlib

from ..plan.ops import AddIfb, ClsactQdisc, HtbQdisc, IngressQdisc, MqQdisc, tc_handle
from ..plan.shaping import HtbClass

TC_H_ROOT = 0xFFFFFFFF


def _root_text(kind: str, handle: int) -> str:
    return f"{kind} {tc_handle(handle)}"


def class_digest(classes) -> list:
    """[count, digest] of (classid, parent, kind) triples, HTB classes only; a parent given
    as the root (how the kernel dumps a qdisc's top classes) counts as the qdisc's handle."""
    lines = sorted(f"{classid:x} {(classid & 0xFFFF0000) if parent == TC_H_ROOT else parent:x} {kind}"
                   for classid, parent, kind in classes if kind == "htb")
    return [len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]]


def of_plan(plan) -> dict:
    """The parts ``plan`` owns, as they should read in the kernel once it is applied."""
    return of_ops(plan.ops)


def of_ops(ops) -> dict:
    """The parts plan operations ``ops`` own once they are carried out: ``of_plan`` of a
    plan and a staged plan's build together is ``of_ops(plan.ops + switch.build)``."""
    out: dict = {}
    classes: dict = {}
    for op in ops:
        if type(op) is HtbQdisc and op.parent == TC_H_ROOT:  # (a group's qdisc hangs under a class)
            out.setdefault(op.dev, {})["root"] = _root_text("htb", op.handle)
        elif type(op) is MqQdisc:  # several tx queues: a tree each under it
            out.setdefault(op.dev, {})["root"] = _root_text("mq", op.handle)
        elif type(op) in (IngressQdisc, ClsactQdisc):
            out.setdefault(op.dev, {})["ingress"] = "ingress" if type(op) is IngressQdisc else "clsact"
        elif type(op) is AddIfb:
            out.setdefault(op.name, {})["device"] = True
        elif type(op) is HtbClass:
            classes.setdefault(op.dev, []).append((op.classid, op.parent, "htb"))
    for dev, parts in out.items():
        if "root" in parts:
            parts["classes"] = class_digest(classes.get(dev, ()))
    return out


def of_kernel(owned: dict, picture: dict) -> dict:
    """The kernel's values of the parts ``owned`` names (for the state file after an apply)."""
    out: dict = {}
    for dev, parts in owned.items():
        seen = picture.get(dev)
        mine = out[dev] = {}
        for part in parts:
            mine[part] = _value(part, seen)
    return out


def _value(part: str, seen):
    if seen is None:
        return None if part != "device" else False
    if part == "device":
        return True
    if part == "root":
        return _root_text(*seen["root"]) if seen["root"] else None
    if part == "ingress":
        return seen["ingress"]
    if part == "classes":
        return None if seen["classes"] is None else class_digest(seen["classes"])
    raise ValueError(f"unknown fingerprint part {part!r}")


def differences(owned: dict, picture: dict) -> list[str]:
    """How the kernel differs from the fingerprint ``owned`` (empty: it matches), one
    phrase each; parts the picture did not read (classes None) are not compared."""
    out = []
    for dev, parts in owned.items():
        seen = picture.get(dev)
        for part, want in parts.items():
            if part == "classes" and seen is not None and seen["classes"] is None:
                continue
            have = _value(part, seen)
            if have != want:
                out.append(_phrase(dev, part, want, have))
    return out


def absent(owned: dict, picture: dict) -> bool:
    """True when none of the owned parts is in the kernel (the record is stale: nothing to delete)."""
    for dev, parts in owned.items():
        seen = picture.get(dev)
        if seen is None:
            continue
        if "device" in parts or ("root" in parts and seen["root"]) or ("ingress" in parts and seen["ingress"]):
            return False
    return True


def _phrase(dev: str, part: str, want, have) -> str:
    if part == "device":
        return f"device {dev} is {'there' if have else 'gone'}"
    if part == "classes":
        want_n = want[0] if want else 0
        have_n = have[0] if have else 0
        same = "different" if want_n == have_n else f"{have_n}"
        return f"{dev} has {same} HTB classes where ratelimit recorded {want_n}"
    what = "root qdisc" if part == "root" else "ingress qdisc"
    return f"{dev} {what} is {have or 'none'} where ratelimit recorded {want or 'none'}"


def describe(picture: dict) -> str:
    """What the devices hold now, in a few words per device (for messages)."""
    out = []
    for dev, seen in picture.items():
        if seen is None:
            out.append(f"no device {dev}")
            continue
        words = [f"root qdisc {_root_text(*seen['root'])}" if seen["root"] else "the default root qdisc"]
        if seen["classes"]:
            words[-1] += f" with {len(seen['classes'])} classes"
        words.append(f"ingress qdisc {seen['ingress']}" if seen["ingress"] else "no ingress qdisc")
        out.append(f"{dev}: {', '.join(words)}")
    return "; ".join(out)
