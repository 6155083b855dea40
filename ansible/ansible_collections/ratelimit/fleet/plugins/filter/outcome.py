"""The ratelimit.fleet.outcome filter: what one router did in a fleet apply, from its hostvars."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: outcome
short_description: What one router did in a fleet apply
description:
  - From a router's hostvars (its C(ratelimit_stage), C(ratelimit_commit), C(ratelimit_abort) and
    C(ratelimit_putback) results), a dict of those steps, each with C(how), C(operations), C(seconds),
    C(ok), C(msg) and C(links) (what is on the interface after it; null where the step did not run).
version_added: "0.4.0"
positional: _input
options:
  _input:
    description: The router's hostvars.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: One router's outcome
  ansible.builtin.debug:
    msg: "{{ hostvars['r1'] | ratelimit.fleet.outcome }}"
"""

RETURN = r"""
_value:
  description: C(stage), C(commit), C(abort) and C(putback), each a dict or null.
  type: dict
"""

STEPS = ("ratelimit_stage", "ratelimit_commit", "ratelimit_abort", "ratelimit_putback")


def _step(result):
    if not result or result.get("skipped"):
        return None
    ok = not (result.get("failed") or result.get("unreachable"))
    return {"ok": ok, "unreachable": bool(result.get("unreachable")), "how": result.get("how"),
            "operations": result.get("operations", 0), "seconds": result.get("seconds", 0.0),
            "changed": bool(result.get("changed")), "msg": None if ok else " ".join(str(result.get("msg", "")).split()),
            "links": result.get("links"), "started_at": result.get("started_at"),
            "finished_at": result.get("finished_at")}


def outcome(hostvars):
    return {step[len("ratelimit_"):]: _step(hostvars.get(step)) for step in STEPS}


def _all_ok(hostvars_list, step):
    return all((_step(h.get(step)) or {}).get("ok", False) for h in hostvars_list)


def all_staged(hostvars_list):
    """True when every router's stage ran and succeeded (an unreachable one did not)."""
    return _all_ok(hostvars_list, "ratelimit_stage")


def all_committed(hostvars_list):
    """True when every router's commit ran and succeeded."""
    return _all_ok(hostvars_list, "ratelimit_commit")


class FilterModule:
    def filters(self):
        return {"outcome": outcome, "all_staged": all_staged, "all_committed": all_committed}
