"""Build step: copy the pinned charting library into ``webui/static/vendor/``.

The dashboard must work on a router with no Internet, so uPlot is served from
the package itself.  It is not committed: ``webui/package.json`` and
``package-lock.json`` pin it (version and integrity hash), npm fetches it, and
this step copies the three files the page needs::

    npm ci --prefix webui --no-audit --no-fund
    python -m ratelimit.webui.vendor  # exits 1 with a one-line reason if something is missing

``python -m ratelimit.webui.vendor --npm`` runs that ``npm ci`` itself first (for setup.py's
build); ``--check`` only verifies that the copies are present and match the
installed package.
"""

import filecmp
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "static" / "vendor"
FILES = {  # source under node_modules -> name in static/vendor
    "uplot/dist/uPlot.iife.min.js": "uPlot.iife.min.js",
    "uplot/dist/uPlot.min.css": "uPlot.min.css",
    "uplot/LICENSE": "uPlot.LICENSE",
}
PAGE_FILES = ("uPlot.iife.min.js", "uPlot.min.css")  # of those, what the page loads


def ready() -> bool:
    """Whether the page can draw charts: the files it loads are in static/vendor."""
    return all((VENDOR / name).is_file() for name in PAGE_FILES)


class VendorError(Exception):
    pass


def _pinned(package_dir: Path) -> str:
    lock = json.loads((package_dir / "package-lock.json").read_text())
    return lock["packages"]["node_modules/uplot"]["version"]


def build(package_dir: Path = HERE, dest: Path = VENDOR, check: bool = False) -> list[Path]:
    modules = package_dir / "node_modules"
    want = _pinned(package_dir)
    meta = modules / "uplot" / "package.json"
    if not meta.is_file():
        raise VendorError(f"{modules}/uplot is not installed (run: npm ci --prefix {package_dir})")
    have = json.loads(meta.read_text())["version"]
    if have != want:
        raise VendorError(f"uplot {have} is installed but package-lock.json pins {want} "
                          f"(run: npm ci --prefix {package_dir})")
    out = []
    for src, name in FILES.items():
        source, target = modules / src, dest / name
        if not source.is_file():
            raise VendorError(f"{source} is missing from the uplot package")
        if check:
            if not target.is_file() or not filecmp.cmp(source, target, shallow=False):
                raise VendorError(f"{target} is missing or differs from uplot {want} (run: python -m ratelimit.webui.vendor)")
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        out.append(target)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    unknown = [a for a in argv if a not in ("--check", "--npm")]
    if unknown:
        print(f"webui.vendor: {unknown[0]} is not an option (allowed: --npm, --check)", file=sys.stderr)
        return 2
    try:
        if "--npm" in argv:
            npm = shutil.which("npm")
            if npm is None:
                raise VendorError("npm is not installed (apt-get install npm)")
            done = subprocess.run([npm, "ci", "--prefix", str(HERE), "--no-audit", "--no-fund"],
                                  capture_output=True, text=True)
            if done.returncode:
                raise VendorError(f"npm ci failed: {' '.join(done.stderr.split())[-300:]}")
        files = build(check=check)
    except (VendorError, OSError, ValueError, KeyError) as err:
        print(f"webui.vendor: {err}", file=sys.stderr)
        return 1
    print(f"webui.vendor: {'verified' if check else 'copied'} {', '.join(f.name for f in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
