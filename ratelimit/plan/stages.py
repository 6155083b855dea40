"""What each link of a cohort needs beside its class, pure: a traced link's delay stage, a
managed queue behind a netem stage, a traced cell's gate, and so the qdisc majors and group
slots a cohort takes (``layout`` places them).

May import: spec.
"""

from ..spec.aqm import managed
from ..spec.model import Cohort


def traced_stage(c: Cohort, direction: str) -> bool:
    """Whether ``c``'s links have a traced side ``direction`` (dest/source) with a delay stage:
    its own delay or loss, or a schedule whose steps delay or lose packets there
    (``tracespec.Source.netem``).  Such a link's gate has the netem stage as its child."""
    src = None if c.trace is None else c.trace.source(direction)
    return src is not None and (c.side(direction).needs_netem() or src.netem)


def cell_groups(c: Cohort) -> int:
    """The group slots the first cohort of ``c``'s cell takes: one, its group's; with a
    traced capacity two, the second its gate's qdisc (``Layout.cell_gate``)."""
    return 2 if c.cell.trace is not None else 1


def managed_stage(c: Cohort, direction: str) -> bool:
    """Whether ``c``'s links on ``direction`` have a managed queue behind a netem stage: the
    AQM is then netem's child (docs/design.md, "Managed queues")."""
    params = c.side(direction)
    return managed(params) is not None and params.needs_netem()


def leaf_majors(c: Cohort) -> int:
    """The qdisc majors each link of ``c`` takes for its queue: two for a traced link with a
    delay stage on either side (its gate, and the netem stage under the gate at the second,
    ``Place.leaf_base`` + links + i) or a managed queue behind a netem stage (netem, and the
    AQM at the second), else one."""
    return 2 if any(traced_stage(c, d) or managed_stage(c, d) for d in ("dest", "source")) else 1
