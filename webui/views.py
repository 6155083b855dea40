"""The dashboard page.  All data arrives through /api/* and /api/stream."""

from pathlib import Path

from flask import Blueprint, current_app, render_template

from .params import source
from ratelimit.spec.names import target_name

bp = Blueprint("views", __name__)

VENDOR = Path(__file__).resolve().parent / "static" / "vendor"
VENDOR_FILES = ("uPlot.iife.min.js", "uPlot.min.css")


def vendor_ready() -> bool:
    return all((VENDOR / name).is_file() for name in VENDOR_FILES)


@bp.get("/")
def index():
    targets = [{"interface": i, "netns": n or "", "name": target_name(n, i)} for n, i in source().targets()]
    return render_template("index.html", targets=targets, read_only=bool(current_app.config["READ_ONLY"]),
                           charts=vendor_ready())
