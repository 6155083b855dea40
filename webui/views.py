"""The dashboard page.  All data arrives through /api/* and /api/stream."""

from flask import Blueprint, current_app, render_template

from ratelimit.spec.names import target_name

from . import vendor
from .params import source

bp = Blueprint("views", __name__)


@bp.get("/")
def index():
    targets = [{"interface": i, "netns": n or "", "name": target_name(n, i)} for n, i in source().targets()]
    return render_template("index.html", targets=targets, read_only=bool(current_app.config["READ_ONLY"]),
                           charts=vendor.ready())
