"""A fleet of routers, pure: the inventory (each router's interface and the client prefixes
behind it) and one scenario split into a request per router (``partition``); for
Kubernetes, pods selected into one assignment per node and the nodes' reports made one
status (``k8s``).  Applying the requests -- stage everywhere, then commit or abort
everywhere -- is the Ansible collection's (``ansible/``; ``docs/fleet.md``).

May import: errors, spec.
"""
