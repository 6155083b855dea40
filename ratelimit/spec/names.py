"""Names that reach the kernel and the shell: interfaces and namespaces (the edge).

``check_interface`` accepts what the kernel accepts as a device name
(``dev_valid_name``: 1-15 bytes, no '/', ':' or whitespace, not '.' or '..');
``check_netns`` what ``ip netns`` can make (a file name in /run/netns).  Both
raise a one-line ``FieldError`` naming the field, the value and what is allowed.

A valid name may still hold shell syntax (``a;b`` is a fine device name), so
every name printed into a script is quoted: ``shell_word`` for shell lines
(``shlex.quote``), ``batch_word`` for ``tc -batch`` lines, whose reader splits
words on whitespace, takes a word in single or double quotes whole and cuts
the line at the first '#'.
"""

import re
import shlex

from ..errors import FieldError, UsageError

IFNAMSIZ = 16  # the kernel's buffer, with its terminating NUL
NETNS_MAX_BYTES = 255  # a file name
_KERNEL_SPACE = frozenset(b" \t\n\v\f\r\xa0")  # the kernel's isspace() on a name's bytes
_BARE = re.compile(r"[A-Za-z0-9_.+@%=,-]+\Z")  # needs no quoting anywhere

INTERFACE_RULE = "is not an interface name (1-15 bytes; no '/', ':' or whitespace; not '.' or '..')"
NETNS_RULE = "is not a namespace name (1-255 bytes; no '/', whitespace or control characters; not '.' or '..')"


def _shown(name) -> str:
    """The value as the error line shows it: quoted, with control characters escaped."""
    return repr(name) if isinstance(name, str) else repr(str(name))


def check_interface(name, field: str = "--interface") -> str:
    """``name`` if the kernel would take it as a device name, else FieldError."""
    if not isinstance(name, str):
        raise FieldError(field, _shown(name), INTERFACE_RULE)
    raw = name.encode("utf-8", "surrogateescape")
    if (not raw or len(raw) >= IFNAMSIZ or name in (".", "..") or b"\0" in raw
            or any(c in b"/:" or c in _KERNEL_SPACE for c in raw)):
        raise FieldError(field, _shown(name), INTERFACE_RULE)
    return name


def check_netns(name, field: str = "--netns") -> str | None:
    """``name`` (None for no namespace) if ``ip netns`` could have made it, else FieldError."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise FieldError(field, _shown(name), NETNS_RULE)
    raw = name.encode("utf-8", "surrogateescape")
    if (not raw or len(raw) > NETNS_MAX_BYTES or name in (".", "..") or b"/" in raw
            or any(c < 0x21 or c == 0x7F or c in _KERNEL_SPACE for c in raw)):
        raise FieldError(field, _shown(name), NETNS_RULE)
    return name


def check_target(interface, netns, field: str = "--interface") -> tuple[str, str | None]:
    """Both names of a (netns, interface) target, checked; an empty netns is none."""
    return check_interface(interface, field), check_netns(netns or None)


def target_name(netns: str | None, interface: str) -> str:
    """A target as a person reads it: ``netns/interface``, or the interface in the host's namespace.

    >>> target_name("lab-router", "r0"), target_name(None, "eth0")
    ('lab-router/r0', 'eth0')
    """
    return f"{netns}/{interface}" if netns else interface


def shell_word(name: str) -> str:
    """``name`` as one word of a shell line."""
    return shlex.quote(name)


def batch_word(name: str) -> str:
    """``name`` as one word of a ``tc -batch`` line: bare when it is plain, else in the
    quotes tc's reader takes whole (it knows no escapes, and cuts lines at '#')."""
    if _BARE.match(name):
        return name
    if "'" not in name:
        return f"'{name}'"
    if '"' not in name:
        return f'"{name}"'
    return name  # not representable: check_batch_name refuses it before a script is printed


def check_batch_name(name: str, field: str = "--interface") -> None:
    """Refuse a device name that no ``tc -batch`` line can carry (for --dry-run)."""
    if "#" in name or ("'" in name and '"' in name):
        raise UsageError(f"{field}: {_shown(name)} cannot be written into a tc -batch script "
                         "(a name there may not hold '#', nor both ' and \"); apply it without --dry-run")
