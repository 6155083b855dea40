"""Every error leaves as JSON ``{"error": "one line"}``; tracebacks go to the log only."""

from flask import current_app, request
from werkzeug.exceptions import HTTPException

from ratelimit.errors import (ApplyError, ConflictError, KernelMissing, NotFoundError, PermissionDenied,
                              RatelimitError, shown, UsageError)


class WebError(Exception):
    """A request the dashboard refuses, with its HTTP status and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def field_error(field: str, value, allowed: str, status: int = 400) -> WebError:
    """``FIELD: VALUE ALLOWED`` -- the same shape as ratelimit.errors.FieldError."""
    value = shown(f"'{value}'" if isinstance(value, str) else value)
    return WebError(status, f"{field}: {value} {allowed}")


# ratelimit's own errors -> HTTP status.  Bad input is 4xx; a server that cannot do
# what was asked (not root, kernel lacks a part) is 503; a kernel step that failed
# (and was rolled back) is 500.
STATUS = (
    (UsageError, 400),
    (NotFoundError, 404),
    (ConflictError, 409),
    (PermissionDenied, 503),
    (KernelMissing, 503),
    (ApplyError, 500),
    (RatelimitError, 500),
)

_HTTP_MESSAGES = {
    400: "bad request",
    404: "no such page or endpoint (see docs/webui.md)",
    405: "method not allowed here",
    413: "request body too large (at most 64 KB)",
}


def status_of(err: RatelimitError) -> int:
    for cls, status in STATUS:
        if isinstance(err, cls):
            return status
    return 500


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def register(app) -> None:
    @app.errorhandler(WebError)
    def web_error(err: WebError):
        return {"error": _one_line(err.message)}, err.status

    @app.errorhandler(RatelimitError)
    def ratelimit_error(err: RatelimitError):
        return {"error": _one_line(str(err))}, status_of(err)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException):
        message = _HTTP_MESSAGES.get(err.code) or _one_line(err.description or err.name).lower()
        if err.code == 405:
            message = f"method: {request.method} is not allowed here (allowed: {', '.join(sorted(err.valid_methods or []))})"
        return {"error": message}, err.code or 500

    @app.errorhandler(Exception)
    def internal_error(err: Exception):
        current_app.logger.exception("unhandled error")
        return {"error": "internal error (see the server log)"}, 500
