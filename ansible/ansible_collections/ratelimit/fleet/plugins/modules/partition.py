#!/usr/bin/python
"""The ratelimit.fleet.partition module: one scenario split into a request per router (see DOCUMENTATION)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: partition
short_description: Split one ratelimit scenario into a request per router
description:
  - "Runs on the controller (C(delegate_to: localhost), C(run_once: true)), where ratelimit is importable."
  - Reads the scenario (or a C(--mix) of hosts) as C(ratelimit) would, works out a mix over the whole
    fleet, and gives each router the hosts behind it (its I(routers) entry's C(clients)).
  - Refuses in one line a shared link behind several routers, a host behind no router or two, and a
    router with nothing behind it.
  - Changes nothing.
version_added: "0.4.0"
options:
  routers:
    description:
      - Each router by inventory name, with C(interface), C(clients) (prefixes) and optionally C(netns).
    type: dict
    required: true
  scenario:
    description: A scenario file, or the name of a shipped one (as C(ratelimit --scenario)).
    type: str
  options:
    description:
      - The other options of the apply, by their C(ratelimit.service.Options) names (C(hosts), C(mix),
        C(ports), C(profile), C(mode), C(bandwidth), C(queues), ...), as strings.
    type: dict
    default: {}
author:
  - ratelimit developers
"""

EXAMPLES = r"""
- name: Split the scenario between the routers
  ratelimit.fleet.partition:
    scenario: home-2001
    routers: "{{ dict(groups['routers'] | zip(groups['routers'] | map('extract', hostvars, 'ratelimit'))) }}"
  delegate_to: localhost
  run_once: true
  register: fleet
"""

RETURN = r"""
requests:
  description: Each router's request (the links module's I(request)), by router name.
  type: dict
  returned: always
links:
  description: Each router's link count.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={"routers": {"type": "dict", "required": True}, "scenario": {"type": "str"},
                       "options": {"type": "dict", "default": {}}},
        supports_check_mode=True,
    )
    try:
        from ratelimit.errors import RatelimitError
    except ImportError as err:
        module.fail_json(msg=f"ratelimit is not importable on the controller ({err}); pip install ratelimit")
    try:
        module.exit_json(changed=False, **_split(module.params))
    except RatelimitError as err:
        module.fail_json(msg=str(err), exit_code=err.exit_code)


def _split(p) -> dict:
    from ratelimit.spec.fleet import partition, routers_of
    from ratelimit.profiles import scenario as scenarios
    from ratelimit.service import make_request
    from ratelimit.state.records import to_json

    routers = routers_of(p["routers"])
    options = {k: (None if v is None else str(v)) for k, v in (p["options"] or {}).items()}
    if p["scenario"]:
        options["scenario"] = scenarios.load(p["scenario"])
    if str(options.get("queues")).strip().lower() == "auto":
        from ratelimit.errors import FieldError
        raise FieldError("options: queues", "auto", "is not read from the controller: give the routers' number of "
                                                    "tx queues")
    whole = make_request(routers[0].interface, netns=routers[0].netns, **options)
    split = partition(whole, routers)
    return {"requests": {name: to_json(req) for name, req in split.items()},
            "links": {name: req.link_count() * (2 if req.direction == "both" else 1) for name, req in split.items()}}


if __name__ == "__main__":
    main()
