"""Burst loss: netem's Gilbert-Elliott and 4-state Markov models, their parameters and what
they mean over many packets.

A link's ``loss`` is a percentage (each packet lost on its own) or one of these models,
given as a table or as text:

    >>> m = parse_loss("gemodel p=1% r=25%", "--loss")
    >>> round(m.loss_rate() * 100, 2), round(m.mean_burst_packets(), 2)
    (3.85, 4.0)

The parameters are netem's (tc-netem(8); Salsano et al., "Definition of a general and
intuitive loss model for packet networks and its implementation in the Netem module in the
Linux kernel", 2012), as percentages:
- ``gemodel``: ``p`` (good to bad, a packet), ``r`` (bad to good), ``h`` (a packet gets
  through in the bad state; tc's ``1-h`` is the loss there) and ``k`` (gets through in the
  good state). Left out, ``h`` is 0% and ``k`` 100%: Gilbert's model.
- ``state``: ``p13``, ``p31``, ``p32``, ``p23``, ``p14`` between netem's four states (1: sent
  in a gap, 2: sent in a burst, 3: lost in a burst, 4: lost alone). Left out, ``p32`` and
  ``p14`` are 0% and ``p23`` 100%, as tc has them.

The stationary values follow the kernel's order (net/sched/sch_netem.c): the Gilbert-Elliott
model decides a packet by the state it finds, then moves; the 4-state model moves, and the
packet is lost if the new state is 3 or 4.

May import: errors, spec.units.
"""

from dataclasses import dataclass

from ..errors import FieldError, UsageError
from .units import format_percent, parse_pairs, parse_part, parse_percent

PARAMS = {"gemodel": ("p", "r", "h", "k"), "state": ("p13", "p31", "p32", "p23", "p14")}
REQUIRED = {"gemodel": ("p", "r"), "state": ("p13", "p31")}
DEFAULTS = {"gemodel": {"h": 0.0, "k": 100.0}, "state": {"p32": 0.0, "p23": 100.0, "p14": 0.0}}
EXAMPLES = {"gemodel": "gemodel p=1% r=25% [h=0%] [k=100%]",
            "state": "state p13=1% p31=30% [p32=0%] [p23=100%] [p14=0%]"}
ALLOWED = f"is not a loss (a percentage as in 0.5%, or a model: '{EXAMPLES['gemodel']}' or '{EXAMPLES['state']}')"


@dataclass(frozen=True)
class LossModel:
    """A burst loss model: ``model`` (a key of ``PARAMS``) and its parameters in that order,
    as percentages."""

    model: str
    pct: tuple

    def params(self) -> dict:
        return dict(zip(PARAMS[self.model], self.pct))

    def as_dict(self) -> dict:
        return {"model": self.model, **self.params()}

    def text(self) -> str:
        """The form ``parse_loss`` reads: ``gemodel p=1% r=25% h=0% k=100%``."""
        return " ".join([self.model, *(f"{k}={format_percent(v)}" for k, v in self.params().items())])

    def tc_words(self) -> str:
        """tc's words after ``loss``: ``gemodel P R 1-H 1-K`` or ``state P13 P31 P32 P23 P14``."""
        p = self.pct
        values = p if self.model == "state" else (p[0], p[1], 100 - p[2], 100 - p[3])
        return " ".join([self.model, *map(format_percent, values)])

    def chain(self) -> tuple[list, list]:
        """(transition matrix, each state's loss): probabilities from 0 to 1."""
        q = [v / 100 for v in self.pct]
        if self.model == "gemodel":
            p, r, h, k = q
            return [[1 - p, p], [r, 1 - r]], [1 - k, 1 - h]
        p13, p31, p32, p23, p14 = q
        matrix = [[1 - p13 - p14, 0, p13, p14], [0, 1 - p23, p23, 0], [p31, p32, 1 - p31 - p32, 0], [1, 0, 0, 0]]
        return matrix, [0, 0, 1, 1]

    def stationary(self) -> list:
        """The share of packets that find each state, in the long run (from the first
        state, where the kernel starts, when the chain cannot leave it)."""
        matrix, _ = self.chain()
        n = len(matrix)
        reach, todo = {0}, [0]
        while todo:  # the states reachable from the first: the long run lives among them
            i = todo.pop()
            for j in range(n):
                if matrix[i][j] > 0 and j not in reach:
                    reach.add(j)
                    todo.append(j)
        states = sorted(reach)
        # pi (P - I) = 0 over the reachable states, one equation swapped for sum(pi) = 1
        rows = [[matrix[i][j] - (i == j) for i in states] + [0.0] for j in states]
        rows[-1] = [1.0] * len(states) + [1.0]
        pi = _solve(rows)
        out = [0.0] * n
        for i, v in zip(states, pi):
            out[i] = v
        return out

    def loss_rate(self) -> float:
        """The share of packets lost, in the long run (0 to 1)."""
        return sum(self._joint(lambda a, b: b))

    def mean_burst_packets(self) -> float:
        """How many packets are lost in a row, on average (0 when none is lost)."""
        starts = sum(self._joint(lambda a, b: (1 - a) * b))
        return self.loss_rate() / starts if starts > 0 else 0.0

    def _joint(self, weight) -> list:
        """Each pair of states' share of packet pairs times ``weight(loss of the first
        packet, loss of the second)``: the same whether a packet takes its loss from the state
        it finds or the state it moves to, as both run through the same long-run shares."""
        matrix, loss = self.chain()
        pi = self.stationary()
        return [pi[i] * matrix[i][j] * weight(loss[i], loss[j])
                for i in range(len(pi)) for j in range(len(pi)) if pi[i]]


def _solve(rows: list) -> list:
    """The solution of the augmented linear system ``rows`` (Gauss-Jordan, partial pivots)."""
    n = len(rows)
    for c in range(n):
        pivot = max(range(c, n), key=lambda r: abs(rows[r][c]))
        rows[c], rows[pivot] = rows[pivot], rows[c]
        for r in range(n):
            if r != c and rows[r][c]:
                f = rows[r][c] / rows[c][c]
                rows[r] = [a - f * b for a, b in zip(rows[r], rows[c])]
    return [rows[i][n] / rows[i][i] for i in range(n)]


def parse_loss(value, field: str = "--loss"):
    """A percentage (``"0.5%"`` -> 0.5) or a ``LossModel``, from text (``gemodel p=1%
    r=25%``; pairs apart by spaces or commas) or a table (``{model = "gemodel", p = "1%",
    r = "25%"}``)."""
    if isinstance(value, dict):
        table = dict(value)
        model = table.pop("model", None)
    elif isinstance(value, str) and value.strip()[:1].isalpha():
        (model,), table = parse_pairs(value, field, ALLOWED, lead=1)
        if model not in PARAMS:
            raise FieldError(field, f"'{value}'", ALLOWED)
    else:
        return parse_percent(value, field)
    if not isinstance(model, str) or model not in PARAMS:
        raise FieldError(field, f"model='{model}'" if isinstance(model, str) else f"model={model!r}",
                         f"is not a loss model (allowed: {', '.join(PARAMS)})")
    names = PARAMS[model]
    unknown = sorted(set(table) - set(names))
    if unknown:
        raise FieldError(field, f"{unknown[0]}={table[unknown[0]]!r}", f"is not a parameter of {model} "
                         f"(allowed: {', '.join(names)})")
    missing = [k for k in REQUIRED[model] if k not in table]
    if missing:
        raise UsageError(f"{field}: {model} needs {' and '.join(REQUIRED[model])} ({missing[0]} is missing; "
                         f"e.g. '{EXAMPLES[model]}')")
    values = {k: parse_part(parse_percent, v, field, k) for k, v in table.items()}
    values = {**DEFAULTS[model], **values}
    for a, b in (("p13", "p14"), ("p31", "p32")) if model == "state" else ():
        if values[a] + values[b] > 100:
            raise FieldError(field, f"{a}+{b}={format_percent(values[a] + values[b])}",
                             "is over 100% (they leave one state)")
    return LossModel(model, tuple(values[k] for k in names))


def from_record(data) -> "LossModel | None":
    """The model ``dataclasses.asdict`` wrote (``{"model": ..., "pct": [...]}``), unchecked
    (``check`` is), or None."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("loss_model is not an object")
    return LossModel(data.get("model"), tuple(data.get("pct") or ()))


def check(model, field: str = "loss") -> None:
    """FieldError unless ``model`` is a ``LossModel`` ``parse_loss`` could have made (a
    record read back is checked with it)."""
    ok = (isinstance(model, LossModel) and model.model in PARAMS and isinstance(model.pct, tuple)
          and len(model.pct) == len(PARAMS[model.model])
          and all(type(v) in (int, float) and 0 <= v <= 100 for v in model.pct))
    if not ok:
        raise FieldError(field, repr(model)[:40], "is not a loss model (allowed: " + ", ".join(PARAMS) + ")")
    parse_loss(model.as_dict(), field)  # the sums of the 4-state model's ways out
