"""The one exception family a user sees.

Every message is a single line written for the person at the terminal: it names
the field, the value and what is allowed.  The CLI prints ``ratelimit: <message>``
and exits with ``exit_code``; ``--debug`` adds the traceback.
"""

import os
import sys

# Documented exit codes (docs/cli.md, "Exit codes").
EXIT_USAGE = 2  # bad option, value or profile
EXIT_NOT_FOUND = 3  # unknown interface, namespace or host
EXIT_PERMISSION = 4  # not root
EXIT_KERNEL = 5  # the kernel lacks a needed part
EXIT_CONFLICT = 6  # interface busy or configured by someone else
EXIT_APPLY = 7  # the kernel refused a step; the interface was restored
EXIT_STATE = 8  # ratelimit's record is unreadable, or the interface is half-configured
EXIT_INTERRUPTED = 130  # 128 + SIGINT (SIGTERM: 143); the interface was restored


class RatelimitError(Exception):
    """Base class: ``str(err)`` is the one-line message for the user."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(RatelimitError):
    """A value given on the command line, in a profile or to the API is invalid."""

    exit_code = EXIT_USAGE


class FieldError(UsageError):
    """``FIELD: VALUE is not ALLOWED`` -- the common shape of a bad value."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}: {value!r} {allowed}" if isinstance(value, str) and value == ""
                         else f"{field}: {shown(value)} {allowed}")


def one_line(err: BaseException) -> str:
    """``err`` as a part of a message: its own text for ours, else its type and its text on
    one line (``one_line(OSError(5, "EIO"))`` is ``"OSError: [Errno 5] EIO"``)."""
    if isinstance(err, RatelimitError):
        return str(err)
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


SHOWN_CHARS = 48  # the most of a value a message repeats


def shown(value) -> str:
    """``value`` as a message repeats it: on one line (control and other unprintable
    characters escaped) and at most SHOWN_CHARS characters, with the length of a longer one."""
    raw = str(value)
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in raw)
    if len(text) > SHOWN_CHARS:
        quoted = len(raw) > 1 and raw[0] == raw[-1] == "'"
        text = f"{text[:SHOWN_CHARS - 8]}...{text[-3:]} ({len(raw) - 2 * quoted} characters)"
    return text


class NotFoundError(RatelimitError):
    exit_code = EXIT_NOT_FOUND


class PermissionDenied(RatelimitError):
    exit_code = EXIT_PERMISSION


def as_root() -> str:
    """How to run this command as root, for a message: ``sudo`` and the command's own path, so
    that the ratelimit of a virtualenv or of pipx runs as itself (root's PATH may not have it).

    >>> as_root().startswith("sudo ")
    True
    """
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "ratelimit"
    if argv0.endswith("__main__.py") or argv0 == "-c":
        return f"sudo {sys.executable} -m ratelimit"
    return f"sudo {os.path.abspath(argv0) if os.sep in argv0 else argv0}"


class KernelMissing(RatelimitError):
    """The running kernel lacks a qdisc, classifier, action or link type."""

    exit_code = EXIT_KERNEL

    def __init__(self, message: str, feature: str = ""):
        super().__init__(message)
        self.feature = feature


class ConflictError(RatelimitError):
    exit_code = EXIT_CONFLICT


class ApplyError(RatelimitError):
    """A kernel step failed; the message says which step and that we rolled back."""

    exit_code = EXIT_APPLY


class StateError(RatelimitError):
    """ratelimit's record of an interface cannot be trusted or the interface is left
    half-configured: the message says what it is and how to recover."""

    exit_code = EXIT_STATE


class Interrupted(RatelimitError):
    """SIGINT or SIGTERM arrived during a change, which was rolled back; exit 128 + signal."""

    def __init__(self, message: str, signum: int = 2):
        super().__init__(message)
        self.exit_code = 128 + signum


def command_exit(main, argv) -> int:
    """The exit status of ``main(argv)`` run as a ``python -m`` entry point: a RatelimitError
    is its one line on stderr and its exit code, Ctrl-C is 130."""
    import sys
    try:
        return main(argv)
    except RatelimitError as err:
        print(f"ratelimit: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
