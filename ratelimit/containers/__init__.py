"""Docker and Podman containers as targets and hosts of links: finding a container, its
namespace and host-side veth (``lookup``), a run's turn and the names it gives
(``attach``), the device a ``--container`` run uses (``targets``), and a container's
recorded links over its life (``life``).

May import: errors, spec, plan, kernel, state, service.
"""
