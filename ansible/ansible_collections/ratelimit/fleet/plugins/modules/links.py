#!/usr/bin/python
"""The ratelimit.fleet.links module: one router's links (see DOCUMENTATION)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: links
short_description: A router's emulated links, applied, staged, committed, removed or read
description:
  - Runs ratelimit on the target, imported under the interpreter that has it
    (C(ansible_python_interpreter)).
  - The links are given as a request, as M(ratelimit.fleet.partition) returns it for each router.
  - I(state=replaced) with I(staged=true) builds the plan beside the installed one, where no packet
    reaches it; I(state=committed) switches to it; I(state=aborted) removes it.
  - The diff's before and after are what C(ratelimit --list --json) says, without counters.
version_added: "0.4.0"
options:
  interface:
    description: The router's client-facing interface.
    type: str
    required: true
  netns:
    description: The network namespace the interface is in.
    type: str
  state:
    description:
      - C(replaced) applies I(request) (or stages it, with I(staged)).
      - C(deleted) removes what ratelimit installed, a staged plan too.
      - C(gathered) reads what is installed.
      - C(rendered) returns the script C(ratelimit --dry-run) prints, changing nothing.
      - C(committed) switches to the staged plan; C(aborted) removes it.
    type: str
    choices: [replaced, deleted, gathered, rendered, committed, aborted]
    default: replaced
  request:
    description:
      - The router's request (M(ratelimit.fleet.partition)'s C(requests) entry).
      - With I(state=committed) in check mode, where nothing was staged, what the commit predicts.
    type: dict
  staged:
    description: With I(state=replaced), stage the plan instead of applying it.
    type: bool
    default: false
  state_dir:
    description: The router's ratelimit state directory (default C($RATELIMIT_STATE_DIR), else C(/run/ratelimit)).
    type: path
author:
  - ratelimit developers
"""

EXAMPLES = r"""
- name: Stage the router's share of the scenario
  ratelimit.fleet.links:
    interface: eth1
    request: "{{ fleet.requests[inventory_hostname] }}"
    staged: true

- name: Switch to it
  ratelimit.fleet.links:
    interface: eth1
    state: committed
"""

RETURN = r"""
how:
  description: What was done (built, in place, make-before-break, staged, already staged, unchanged, committed,
    removed, nothing).
  type: str
  returned: always
operations:
  description: The traffic-control operations sent.
  type: int
  returned: always
seconds:
  description: How long the kernel part took.
  type: float
  returned: always
links:
  description: What is on the interface afterwards, as in the diff's after.
  type: dict
  returned: always
previous:
  description: The request that was applied before (for putting it back), or null.
  type: dict
  returned: always
started_at:
  description: When the change began, in seconds since the epoch (the fleet's commit skew is their spread).
  type: float
  returned: when the state changes something (not gathered or rendered)
finished_at:
  description: When the change ended, in seconds since the epoch.
  type: float
  returned: when the state changes something (not gathered or rendered)
rendered:
  description: With I(state=rendered), the script.
  type: str
  returned: when state is rendered
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "interface": {"type": "str", "required": True},
            "netns": {"type": "str"},
            "state": {"type": "str", "default": "replaced",
                      "choices": ["replaced", "deleted", "gathered", "rendered", "committed", "aborted"]},
            "request": {"type": "dict"},
            "staged": {"type": "bool", "default": False},
            "state_dir": {"type": "path"},
        },
        required_if=[("state", "replaced", ("request",)), ("state", "rendered", ("request",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["state_dir"]:
        os.environ["RATELIMIT_STATE_DIR"] = p["state_dir"]
    try:
        from ratelimit.errors import RatelimitError
    except ImportError as err:
        module.fail_json(msg=f"ratelimit is not importable by {module._name} on this host ({err}); set "
                             "ansible_python_interpreter to the Python that has it (pip install ratelimit)")
    try:
        module.exit_json(**_run(module, p))
    except RatelimitError as err:
        module.fail_json(msg=str(err), exit_code=err.exit_code)


def _run(module, p) -> dict:
    from ratelimit.service import readout, staging
    from ratelimit.service.actions import apply, clean, preview
    from ratelimit.spec.names import check_target
    from ratelimit.state import records

    interface, netns = check_target(p["interface"], p["netns"])
    req = None
    if p["request"] is not None:
        req = records.request_from_json(p["request"], "request")
        if (req.interface, req.netns) != (interface, netns):
            from ratelimit.errors import FieldError
            raise FieldError("request", f"{req.interface} in {req.netns or 'the host namespace'}",
                             f"is not this task's interface ({interface} in {netns or 'the host namespace'})")
    if p["state"] == "rendered":
        from ratelimit.plan.script import script
        ops, how = preview(req, stage=p["staged"])
        return {"changed": False, "how": how, "operations": len(ops), "seconds": 0.0, "rendered": script(ops, netns),
                "links": readout.listing(req), "previous": None}
    was = readout.installed(interface, netns, repair=not module.check_mode)
    before = readout.listing(was.request, was.staged)
    previous = None if was.request is None else records.to_json(was.request)
    if p["state"] == "gathered":
        return {"changed": False, "how": "nothing", "operations": 0, "seconds": 0.0, "links": before,
                "previous": previous}
    started_at = time.time()
    after, how, ops, took = _change(module, p, req, was, interface, netns, readout, staging, apply, clean)
    changed = after != before
    out = {"changed": changed, "how": how, "operations": ops, "seconds": took, "links": after, "previous": previous,
           "started_at": started_at, "finished_at": time.time()}
    if module._diff:
        out["diff"] = {"before": before, "after": after}
    return out


def _change(module, p, req, was, interface, netns, readout, staging, apply, clean):
    """(what is there afterwards, how, operations sent, seconds) of the task's change; in
    check mode what it would be, with nothing sent."""
    state, check = p["state"], module.check_mode
    if state == "deleted":
        if check:
            return readout.listing(None), "removed" if was.request or was.staged else "nothing", 0, 0.0
        started = time.monotonic()
        removed = clean(interface, netns)
        return readout.listing(None), "removed" if removed else "nothing", 0, time.monotonic() - started
    if state in ("committed", "aborted"):
        if was.staged is None:
            if check and req is not None and state == "committed":  # what the stage before it would have staged
                return readout.listing(req), "committed", 0, 0.0
            return readout.listing(was.request), "nothing", 0, 0.0
        target = was.staged if state == "committed" else was.request
        if check:
            return readout.listing(target), state, 0, 0.0
        started = time.monotonic()
        if state == "committed":
            plan = staging.commit(interface, netns)
            return readout.listing(plan.request), "committed", len(plan.changed), time.monotonic() - started
        staging.abort(interface, netns)
        return readout.listing(was.request), "aborted", 0, time.monotonic() - started
    if check:
        return _predicted(req, was, p["staged"], readout)
    started = time.monotonic()
    if p["staged"]:
        plan = staging.stage(req)
        took = time.monotonic() - started
        if plan.how == "unchanged":
            return readout.listing(was.request), "unchanged", 0, took
        return readout.listing(was.request, plan.request), plan.how, len(plan.changed), took
    plan = apply(req)
    ops = len(plan.ops) if plan.changed is None else len(plan.changed)
    return readout.listing(plan.request), plan.how if ops else "unchanged", ops, time.monotonic() - started


def _predicted(req, was, staged, readout):
    """What a replace would leave, worked out from the requests (check mode)."""
    from ratelimit.plan import placement
    from ratelimit.plan.compile import compile_plan
    plan = compile_plan(req)
    if was.request is not None:
        _, changes, _ = placement.over(was.plan, plan)
        if changes == ():
            return readout.listing(was.request), "unchanged", 0, 0.0
    if staged:
        return readout.listing(was.request, req), "staged", 0, 0.0
    return readout.listing(req), "replaced", 0, 0.0


if __name__ == "__main__":
    main()
