"""Finding and loading link profiles (TOML).

Search order for ``--profile NAME``: each directory of ``RATELIMIT_PROFILE_PATH``
(colon-separated, left to right), then ``~/.config/ratelimit/profiles/``, then
the profiles shipped with ratelimit; the first ``NAME.toml`` wins.  A value
containing ``/`` or ending in ``.toml`` is read as a file path.
"""

import os
import re
import tomllib
from pathlib import Path

from .. import SHIPPED
from ..errors import FieldError, NotFoundError, UsageError
from ..spec import linklayer
from ..spec.aqm import parse_aqm
from ..spec.lossmodel import LossModel, parse_loss
from ..spec.macslot import parse_slot
from ..spec.model import LinkParams, Profile
from ..spec.units import parse_burst, parse_percent, parse_queue, parse_rate_bps, parse_time_us
from ..traces import tracespec

SIDE_FIELDS = {
    # toml key: (LinkParams field, parser)
    "rate": ("rate_bps", parse_rate_bps),
    "delay": ("delay_us", parse_time_us),
    "jitter": ("jitter_us", parse_time_us),
    "delay_correlation": ("delay_corr_pct", parse_percent),
    "loss": ("loss_pct", parse_loss),  # or loss_model: side_value
    "loss_correlation": ("loss_corr_pct", parse_percent),
    "duplicate": ("duplicate_pct", parse_percent),
    "duplicate_correlation": ("duplicate_corr_pct", parse_percent),
    "corrupt": ("corrupt_pct", parse_percent),
    "corrupt_correlation": ("corrupt_corr_pct", parse_percent),
    "reorder": ("reorder_pct", parse_percent),
    "reorder_correlation": ("reorder_corr_pct", parse_percent),
    "slot": ("slot", parse_slot),
    "aqm": ("aqm", parse_aqm),
    "queue": ("queue", parse_queue),  # or aqm, given as a table: side_value
    "burst": ("burst", parse_burst),
}


def side_value(key: str, value, field: str) -> tuple:
    """(LinkParams field, value) of the link option ``key`` given ``value``: ``loss`` is
    ``loss_pct`` for a percentage, ``loss_model`` for a model; ``queue`` is ``aqm`` for a
    table (``{discipline = "fq_codel"}``).

    >>> side_value("loss", "gemodel p=1% r=25%", "--loss")[0]
    'loss_model'
    """
    if key == "queue" and isinstance(value, dict):
        return "aqm", parse_aqm(value, field)
    attr, parser = SIDE_FIELDS[key]
    parsed = parser(value, field)
    return ("loss_model" if isinstance(parsed, LossModel) else attr), parsed


_TOP_FIELDS = {"description", "source", "down", "up", "link", "reference_rate", *tracespec.PROFILE_KEYS}
_LINK_FIELDS = {"layer", "overhead"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")


def check_name(name, field: str = "--profile") -> str:
    """``name`` if it names a profile (never a path or a file), else FieldError."""
    if not isinstance(name, str) or not _NAME.match(name) or name.endswith(".toml"):
        raise FieldError(field, repr(name) if isinstance(name, str) else name,
                         "is not a profile name (allowed: a name 'ratelimit profiles' lists; no paths or .toml files)")
    return name


def search_path() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("RATELIMIT_PROFILE_PATH", "").split(":") if p]
    dirs.append(Path(os.path.expanduser("~/.config/ratelimit/profiles")))
    dirs.append(SHIPPED)
    return dirs


def find(name: str, field: str = "--profile") -> Path:
    if "/" in name or name.endswith(".toml"):
        path = Path(name)
        if not path.is_file():
            raise NotFoundError(f"--profile: file '{name}' does not exist")
        return path
    for d in search_path():
        path = d / f"{name}.toml"
        if path.is_file():
            return path
    known = ", ".join(sorted(available()))
    raise UsageError(f"{field}: '{name}' is not a profile (known: {known}; see 'ratelimit profiles')")


def load(name: str, field: str = "--profile") -> Profile:
    """The profile ``name`` (or the file it names, with a ``/`` or ``.toml``)."""
    return parse_file(find(name, field))


def load_named(name, field: str = "--profile") -> Profile:
    """The profile ``name``, which must be a name (``check_name``): what a schedule's step takes."""
    return load(check_name(name, field), field)


def parse_file(path: Path) -> Profile:
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"profile {where}: not valid TOML ({err})") from None
    except OSError as err:
        raise NotFoundError(f"profile {where}: cannot be read ({err.strerror})") from None
    unknown = set(data) - _TOP_FIELDS
    if unknown:
        raise FieldError(f"profile {where}", f"'{sorted(unknown)[0]}'",
                         "is not a field (allowed: description, source, reference_rate, "
                         f"{', '.join(tracespec.PROFILE_KEYS)}, [link], [down], [up])")
    sides = {}
    for side in ("down", "up"):
        table = data.get(side, {})
        if not isinstance(table, dict):
            raise FieldError(f"profile {where}", f"'{side}'", "must be a table ([down] or [up])")
        values = {}
        for key, value in table.items():
            if key not in SIDE_FIELDS:
                raise FieldError(f"profile {where}: [{side}]", f"'{key}'",
                                 f"is not a field (allowed: {', '.join(SIDE_FIELDS)})")
            attr, parsed = side_value(key, value, f"profile {where}: [{side}] {key}")
            values[attr] = parsed
        sides[side] = LinkParams(**values)
    for key in ("description", "source"):
        if not isinstance(data.get(key, ""), str):
            raise FieldError(f"profile {where}", f"'{key}'", "must be a string")
    reference = data.get("reference_rate")
    return Profile(name=Path(path).stem, description=data.get("description", ""),
                   source=data.get("source", ""), down=sides["down"], up=sides["up"],
                   link=_link(data.get("link", {}), where),
                   reference_bps=None if reference is None else parse_rate_bps(reference, f"profile {where}: reference_rate"),
                   path=where,
                   trace=tracespec.ask(data, tracespec.PROFILE_KEYS, str(Path(path).parent), f"profile {where}: "))


def _link(table, where: str) -> linklayer.LinkLayer:
    """The ``[link]`` table: ``layer`` (``linklayer.LAYERS``) and an optional ``overhead``."""
    field = f"profile {where}: [link]"
    if not isinstance(table, dict):
        raise FieldError(f"profile {where}", "'link'", "must be a table ([link])")
    unknown = set(table) - _LINK_FIELDS
    if unknown:
        raise FieldError(field, f"'{sorted(unknown)[0]}'", f"is not a field (allowed: {', '.join(sorted(_LINK_FIELDS))})")
    overhead = table.get("overhead")
    if overhead is not None and (isinstance(overhead, bool) or not isinstance(overhead, int)):
        raise FieldError(f"{field} overhead", f"'{overhead}'", "is not a whole number of bytes")
    return linklayer.layer(table.get("layer", "ethernet"), overhead, f"{field} layer", f"{field} overhead")


def available() -> dict[str, Path]:
    """Every profile name on the search path, with the file that wins."""
    found: dict[str, Path] = {}
    for d in search_path():
        if d.is_dir():
            for path in sorted(d.glob("*.toml")):
                found.setdefault(path.stem, path)
    return dict(sorted(found.items()))
