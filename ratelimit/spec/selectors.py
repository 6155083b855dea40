"""Parsing the selectors a user types: hosts and port ranges (the edge)."""

import socket
from ipaddress import ip_address, ip_network, summarize_address_range

from ..errors import FieldError, NotFoundError, UsageError
from .model import IPAddress
from .units import whole_number


def parse_ports(text: str, field: str = "--ports") -> tuple[tuple[int, int], ...]:
    """``"1024-2047,3000"`` -> ((1024, 2047), (3000, 3000)); overlaps are merged."""
    if text is None or not str(text).strip():
        raise UsageError(f"{field}: none given (ranges like 1024-2047,3000)")
    ranges = [parse_port_range(part, field) for part in str(text).split(",")]
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def parse_port_range(text: str, field: str = "--ports") -> tuple[int, int]:
    """``"1024-2047"`` -> (1024, 2047), ``"3000"`` -> (3000, 3000)."""
    part = str(text).strip()
    lo_text, dash, hi_text = part.partition("-")
    lo = whole_number(lo_text)
    hi = whole_number(hi_text) if dash else lo
    if lo is None or hi is None:
        raise FieldError(field, f"'{part}'", "is not a port or range (e.g. 1024-2047,3000)")
    for p in (lo, hi):
        if not 1 <= p <= 65535:
            raise FieldError(field, p, "is not a port (1-65535)")
    if lo > hi:
        raise FieldError(field, part, "is a reversed range (low-high)")
    return lo, hi


def format_ports(ports) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ports)


MAX_EXPANDED = 1 << 16  # addresses one range or prefix may stand for


def parse_hosts(text, field: str = "--hosts", resolve=socket.getaddrinfo) -> tuple[IPAddress, ...]:
    """Comma-separated names, addresses, ranges (``198.18.0.2-198.18.0.9``) or prefixes
    (``198.18.0.0/28``, every address in it) -> addresses (names resolved, all families),
    each once, in the order given."""
    items = text if isinstance(text, (list, tuple)) else str(text or "").split(",")
    items = [str(h).strip() for h in items if str(h).strip()]
    if not items:
        raise UsageError(f"{field}: none given (comma-separated names or addresses)")
    found: list[IPAddress] = []
    for item in items:
        try:
            addrs = _expanded(item, field) if ("/" in item or "-" in item.strip("[]")[1:]) else \
                [ip_address(item.strip("[]"))]
        except ValueError:
            try:
                infos = resolve(item, None, 0, socket.SOCK_STREAM)
            except (socket.gaierror, UnicodeError):
                raise NotFoundError(f"{field}: '{item}' is not an address and does not resolve to one") from None
            addrs = [ip_address(info[4][0].split("%")[0]) for info in infos]
        found.extend(addrs)
    return tuple(dict.fromkeys(found))


def parse_servers(text, field: str = "--servers") -> tuple:
    """The far side of a cohort's flows: comma-separated addresses, prefixes or ranges
    (a list of texts too) -> address prefixes, the fewest that cover them, each once; no
    names (a server's name may stand for addresses that change)."""
    items = text if isinstance(text, (list, tuple)) else str(text or "").split(",")
    items = [str(s).strip() for s in items if str(s).strip()]
    if not items:
        raise UsageError(f"{field}: none given (addresses, prefixes like 198.18.1.0/24, or ranges)")
    nets: list = []
    for item in items:
        try:
            if "/" in item:
                nets.append(ip_network(item.strip("[]"), strict=False))
                continue
            lo_text, dash, hi_text = item.strip("[]").partition("-") if "-" in item.strip("[]")[1:] else \
                (item.strip("[]"), "", "")
            lo = ip_address(lo_text.strip().strip("[]"))
            hi = ip_address(hi_text.strip().strip("[]")) if dash else lo
        except ValueError:
            raise FieldError(field, f"'{item}'", "is not an address, prefix (198.18.1.0/24) or range") from None
        if lo.version != hi.version or hi < lo:
            raise FieldError(field, f"'{item}'", "is not a range (low-high, one address family)")
        nets.extend(summarize_address_range(lo, hi))
    return tuple(dict.fromkeys(nets))


def _expanded(item: str, field: str) -> list:
    """The addresses of a prefix or an inclusive range; ValueError when ``item`` is neither
    (a host name with a dash is then looked up), FieldError when it is one but too wide."""
    if "/" in item:
        try:
            net = ip_network(item, strict=False)
        except ValueError:
            raise FieldError(field, f"'{item}'", "is not an address prefix (e.g. 198.18.0.0/28)") from None
        if net.num_addresses > MAX_EXPANDED:
            raise FieldError(field, f"'{item}'", f"holds {net.num_addresses} addresses (at most {MAX_EXPANDED} per prefix)")
        return list(net)
    lo_text, _, hi_text = item.partition("-")
    lo, hi = ip_address(lo_text.strip().strip("[]")), ip_address(hi_text.strip().strip("[]"))
    if lo.version != hi.version or hi < lo:
        raise FieldError(field, f"'{item}'", "is not a range (low-high, one address family)")
    if int(hi) - int(lo) + 1 > MAX_EXPANDED:
        raise FieldError(field, f"'{item}'", f"holds {int(hi) - int(lo) + 1} addresses (at most {MAX_EXPANDED} per range)")
    return [ip_address(n) for n in range(int(lo), int(hi) + 1)]
