"""Who may change things, and from where.

* **Host check** (every request): the ``Host`` header must name this server
  (``ALLOWED_HOSTS``), which defeats DNS rebinding -- a hostile page whose name
  resolves to 127.0.0.1 still sends its own name as Host.
* **Token** (every change): ``X-Ratelimit-Token: <token>``.  A custom header
  cannot be sent cross-site without a CORS preflight, which this server never
  grants, and nothing is ever authorized by a cookie.
* **Origin** (every change): when a browser sends ``Origin`` (or
  ``Sec-Fetch-Site``) it must be this server's own (host and port).
* **JSON only** (every change): ``Content-Type: application/json``, which a
  plain HTML form cannot send.
"""

import hmac
from urllib.parse import urlsplit

from flask import current_app, request

from .errors import WebError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")  # what the Host header may carry by default
TOKEN_HEADER = "X-Ratelimit-Token"
CHANGES = {"POST", "PUT", "PATCH", "DELETE"}

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _hostname(host: str) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1', '[::1]:8080' -> '::1'."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def check_host() -> None:
    allowed = current_app.config["ALLOWED_HOSTS"]
    if allowed is None:
        return
    raw = request.headers.get("Host", "")
    if _hostname(raw).lower() not in {h.lower() for h in allowed}:
        raise WebError(400, f"Host: '{raw}' is not a name of this dashboard (allowed: {', '.join(allowed)};"
                            " start it with --allow-host NAME)")


def check_change() -> None:
    """Token, origin and content type of a request that changes something."""
    if current_app.config["READ_ONLY"]:
        raise WebError(403, "control is off: this dashboard was started with --read-only")
    origin = request.headers.get("Origin")
    # Compare host:port only, so a TLS proxy in front (https Origin, http here) still works.
    if origin is not None and urlsplit(origin).netloc.lower() != request.host.lower():
        raise WebError(403, f"Origin: '{origin}' is not this dashboard (allowed: {request.scheme}://{request.host})")
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        raise WebError(403, f"Sec-Fetch-Site: '{site}' is not allowed (allowed: same-origin, none)")
    given = request.headers.get(TOKEN_HEADER)
    if not given:
        raise WebError(401, f"{TOKEN_HEADER}: missing (changes need the access token the server printed at start)")
    if not hmac.compare_digest(given.encode(), current_app.config["TOKEN"].encode()):
        raise WebError(403, f"{TOKEN_HEADER}: wrong token (use the one the server printed at start)")
    if request.mimetype != "application/json":
        raise WebError(415, f"Content-Type: '{request.mimetype or ''}' is not allowed (allowed: application/json)")


def register(app) -> None:
    @app.before_request
    def _before():
        check_host()
        if request.method in CHANGES:
            check_change()

    @app.after_request
    def _headers(response):
        h = response.headers
        h.setdefault("Content-Security-Policy", CSP)
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("X-Frame-Options", "DENY")
        h.setdefault("Referrer-Policy", "no-referrer")
        h.setdefault("Cache-Control", "no-store")
        return response
