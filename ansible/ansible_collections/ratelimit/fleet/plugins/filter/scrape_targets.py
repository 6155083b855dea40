"""The ratelimit.fleet.scrape_targets filter: the fleet's Prometheus targets, from the inventory."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: scrape_targets
short_description: The fleet's Prometheus targets, one per router
description:
  - From the routers' C(ratelimit) variables (as the partition module takes them, each with C(metrics),
    the HOST:PORT where its C(ratelimit web) serves C(/metrics)), the JSON of a Prometheus
    C(file_sd_configs) file, each target labelled with its router's name.
  - Runs on the controller, where ratelimit is importable (C(ratelimit.spec.fleet.scrape_targets)).
  - A router without C(metrics), or with a bad one, fails the task in one line naming it.
version_added: "0.4.0"
positional: _input
options:
  _input:
    description: The routers, C({name: ratelimit variables}).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the fleet's Prometheus targets
  ansible.builtin.copy:
    content: "{{ dict(groups['routers'] | zip(groups['routers'] | map('extract', hostvars, 'ratelimit')))
                 | ratelimit.fleet.scrape_targets | to_nice_json }}"
    dest: /etc/prometheus/ratelimit-targets.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: A list of C({targets: [HOST:PORT], labels: {router: NAME}}).
  type: list
"""

from ansible.errors import AnsibleFilterError


def scrape_targets(routers):
    from ratelimit.errors import RatelimitError
    from ratelimit.spec import fleet
    try:
        return fleet.scrape_targets(fleet.routers_of(dict(routers)))
    except RatelimitError as e:
        raise AnsibleFilterError(f"ratelimit.fleet.scrape_targets: {e}") from None


class FilterModule:
    def filters(self):
        return {"scrape_targets": scrape_targets}
