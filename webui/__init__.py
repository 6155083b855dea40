"""The ratelimit web dashboard: live queue statistics, charts and control, a JSON API and
Prometheus ``/metrics``; ``ratelimit web`` registers itself as a subcommand.

May import: ratelimit's errors, spec, profiles, kernel, state, service, containers; never cli or lab.

``create_app(config)`` is the factory.  Config keys (all optional):

  TARGETS       [(netns or None, interface), ...] to watch when no STATS_SOURCE is given
  STATS_SOURCE  an object with StatsSource's reading methods (tests inject one)
  START_POLLING start the source's poller thread (default: only for a source made here)
  CONTROL       what apply/clean call: make_request, apply, clean (default ratelimit.service)
  TOKEN         the access token for changes (default: a new random one)
  READ_ONLY     turn apply/clean off
  ALLOWED_HOSTS host names the Host header may carry (None: any)
  STREAM_LIMIT  most live streams open at once (default 16)
  LOCK_TIMEOUT  seconds an apply/clean waits for another run on the interface (default 10;
                then 409 with a one-line message)
"""

import secrets

from flask import Flask

__all__ = ["create_app"]


def create_app(config: dict | None = None) -> Flask:
    """The dashboard's app, set up by ``config`` (the keys above): ``create_app({"READ_ONLY": True})``."""
    # start-up: ``ratelimit web`` imports this package to parse its options; the routes, the poller
    # and the service load here, so --help and a usage error answer 0.1-0.15 s sooner
    from ratelimit import service
    from . import api, errors, live, metrics, security, stats, views  # start-up, as the line above

    app = Flask(__name__)
    app.config.update(
        TARGETS=[(None, "eth0")],
        STATS_SOURCE=None,
        START_POLLING=None,
        CONTROL=None,
        CONTAINER_TARGETS={},  # target -> why the page does not change it (webui.containers.owners)
        TOKEN=None,
        READ_ONLY=False,
        ALLOWED_HOSTS=list(security.LOOPBACK_NAMES),
        STREAM_LIMIT=16,
        LOCK_TIMEOUT=10.0,
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    if config:
        app.config.update(config)
    if not app.config["TOKEN"]:
        app.config["TOKEN"] = secrets.token_urlsafe(24)
    if app.config["CONTROL"] is None:
        app.config["CONTROL"] = service
    source = app.config["STATS_SOURCE"]
    if source is None:
        source = stats.StatsSource(app.config["TARGETS"])
        app.config["STATS_SOURCE"] = source
        if app.config["START_POLLING"] is None:
            app.config["START_POLLING"] = True
    app.json.sort_keys = False  # keep the documented field order
    app.extensions["ratelimit_stats"] = source
    app.extensions["ratelimit_streams"] = {"open": 0}

    errors.register(app)
    security.register(app)
    app.register_blueprint(views.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(live.bp)
    app.register_blueprint(metrics.bp)

    if app.config["START_POLLING"]:
        source.start()
    return app
