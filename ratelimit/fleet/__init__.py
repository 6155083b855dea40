"""A fleet of routers, pure: the inventory (each router's interface and the client prefixes
behind it), one scenario split into a request per router (``partition``), and the routers'
reports summed (``report``).  Applying the requests -- stage everywhere, then commit or
abort everywhere -- is the Ansible collection's (``ansible/``; ``docs/fleet.md``).

May import: errors, spec.
"""
