"""``ratelimit web``: the dashboard on waitress (never Flask's development server)."""

import argparse
import ipaddress
import logging
import os
import secrets
import signal
import sys
import threading
import time

from ratelimit.errors import EXIT_USAGE, RatelimitError, shown
from ratelimit.kernel.netns import parent_only
from ratelimit.spec.names import check_target, target_name
from ratelimit.spec.units import parse_seconds, whole_number

from . import vendor
from .security import LOOPBACK_NAMES
from .snapshot import target_key

DEFAULT_LISTEN = "127.0.0.1:8080"
TOKEN_ENV = "RATELIMIT_WEB_TOKEN"


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ratelimit web", add_help=False,
                description="Live dashboard: queue statistics per emulated link, charts, and "
                            "apply/clear from the page. Changes need the access token it prints.")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.add_argument("--interface", "--if", action="append", default=[], metavar="IF",
                   help="interface to watch (repeat or comma-separate; NS/IF names one in namespace NS); "
                        "default: every interface ratelimit configured in --netns, else eth0")
    p.add_argument("--netns", default=None, metavar="NS", help="namespace of the interfaces (default: this one)")
    p.add_argument("--container", action="append", default=[], metavar="NAME|ID",
                   help="a Docker or Podman container whose links to watch: on its host-side veth (a server's "
                        "or a user's) and on its own interface (a server's in 0.4 and earlier); repeat or "
                        "comma-separate (docs/containers.md)")
    p.add_argument("--engine", choices=("docker", "podman"), help="the engine of --container (default: whichever has it)")
    p.add_argument("--network", metavar="NAME", help="the network of --container, when it is on several")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN}; port 0 picks a free one)")
    p.add_argument("--token", default=None, metavar="TOKEN",
                   help=f"access token for changes (default: ${TOKEN_ENV}, else a new random one, printed)")
    p.add_argument("--read-only", action="store_true", help="turn apply/clear off")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="another name the dashboard is reached by (Host header check)")
    p.add_argument("--interval", default="1", metavar="SECONDS",
                   help="statistics refresh interval (default 1, 0.2-60)")
    p.add_argument("--history", default="300", metavar="SECONDS",
                   help="history kept for the charts (default 300, 10-3600)")
    p.add_argument("--debug", action="store_true", help="log tracebacks of internal errors")
    return p


def _quoted(text: str) -> str:
    return shown(f"'{text}'")


def parse_listen(text: str) -> tuple[str, int]:
    allowed = "is not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080)"
    text = text.strip()
    if whole_number(text) is not None:
        host, port_text = "127.0.0.1", text
    elif text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest.startswith(":"):
            raise _Usage(f"--listen: {_quoted(text)} {allowed}")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise _Usage(f"--listen: {_quoted(text)} {allowed}")
    port = whole_number(port_text)
    if port is None or not 0 <= port <= 65535:
        raise _Usage(f"--listen: {_quoted(text)} has no valid port (0-65535)")
    return host, port


def _targets(args, watches=()) -> list:
    names = [n.strip() for item in args.interface for n in item.split(",") if n.strip()]
    from .containers import targets  # start-up: the containers' part and the service load once the options parse
    if not names and watches:
        return targets(watches)
    if not names:
        from ratelimit.state import records  # start-up, as .containers above (which loads it too)
        names = records.interfaces(args.netns) or ["eth0"]
    out = []
    for name in names:
        netns, _, interface = name.rpartition("/") if "/" in name else (args.netns, "", name)
        try:
            interface, netns = check_target(interface, netns)
        except RatelimitError as e:
            raise _Usage(f"{e} (NS/IF names one in namespace NS)") from None
        key = target_key(netns, interface)
        if key not in out:
            out.append(key)
    return out + [t for t in targets(watches) if t not in out]


def _watches(args) -> list:
    """The containers of --container, resolved (webui.containers)."""
    names = [n.strip() for item in args.container for n in item.split(",") if n.strip()]
    if not names:
        if args.engine or args.network:
            raise _Usage("--engine/--network: they go with --container")
        return []
    from .containers import watch  # start-up, as in _targets
    return watch(names, network=args.network, engine=args.engine)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _allowed_hosts(host: str, extra: list) -> list:
    """The names the Host header may carry: the listen address (unless a wildcard), the
    loopback names and ``--allow-host``'s."""
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    names = [] if wildcard else [host]
    return list(dict.fromkeys(names + list(LOOPBACK_NAMES) + list(extra)))


def _url(host: str, port: int) -> str:
    where = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    return f"http://[{where}]:{port}/" if ":" in where else f"http://{where}:{port}/"


def web_main(argv=None, *, stdout=None, stderr=None, serve=None) -> int:
    """Run the dashboard until interrupted; returns the exit code.

    ``serve(app, host, port, ready)`` replaces the waitress loop (tests);
    ``ready(host, port)`` prints the address and token once the socket is bound.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        host, port = parse_listen(args.listen)
        args.interval = parse_seconds(args.interval, "--interval", 0.2, 60)
        args.history = parse_seconds(args.history, "--history", 10, 3600)
        if not is_loopback(host) and not args.allow_host:
            raise _Usage(f"--listen: {args.listen} serves beyond this machine; add --allow-host NAME for each "
                         "name or address the dashboard is reached by (e.g. --allow-host router.lab)")
        watches = _watches(args)
        targets = _targets(args, watches)
        token = args.token or os.environ.get(TOKEN_ENV) or None
        if token is not None and len(token) < 16:
            raise _Usage("--token: too short (at least 16 characters)")
    except (_Usage, RatelimitError) as e:
        print(f"ratelimit web: {e}", file=err)
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return int(e.code or 0)

    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="ratelimit web: %(levelname)s %(name)s: %(message)s", stream=err)
    generated = token is None
    token = token or secrets.token_urlsafe(24)

    # start-up: what serves loads once the options parse (--help, a usage error: 0.1-0.15 s sooner)
    from . import containers, create_app, stats
    from ratelimit.service import readout  # start-up, as the line above
    reader = containers.Reader(readout.Poller(repair=True), watches)  # a killed run's interface is put back, as --list does
    source = stats.StatsSource(targets, reader, interval=args.interval, history=args.history)
    app = create_app({"STATS_SOURCE": source, "START_POLLING": False, "TOKEN": token,
                      "READ_ONLY": args.read_only, "ALLOWED_HOSTS": _allowed_hosts(host, args.allow_host),
                      "CONTAINER_TARGETS": containers.owners(watches)})

    def ready(bound_host: str, bound_port: int) -> None:
        url = _url(bound_host, bound_port)
        print(f"ratelimit web: watching {', '.join(target_name(n, i) for n, i in targets)}; "
              f"serving {url}{' (read-only)' if args.read_only else ''}", file=out)
        if not vendor.ready():
            print("ratelimit web: charts are off: static/vendor/uPlot is missing "
                  "(build step: npm ci --prefix webui && python -m ratelimit.webui.vendor)", file=out)
        if not args.read_only:
            if generated:
                print(f"ratelimit web: access token {token}", file=out)
                print(f"ratelimit web: open {url}#token={token}", file=out)
            else:
                print("ratelimit web: access token as configured", file=out)
        out.flush()

    source.start()
    try:
        (serve or _serve_waitress)(app, host, port, ready)
    except OSError as e:
        print(f"ratelimit web: --listen: {args.listen} cannot be used ({e.strerror or e})", file=err)
        return 1
    except RatelimitError as e:
        print(f"ratelimit web: {e}", file=err)
        return e.exit_code
    except KeyboardInterrupt:
        pass
    finally:
        source.stop()
        reader.close()
    return 0


def _serve_waitress(app, host: str, port: int, ready) -> None:
    from waitress import create_server  # only to serve for real: tests pass web_main a serve of their own
    streams = app.config["STREAM_LIMIT"]
    server = create_server(app, host=host, port=port, threads=streams + 8, ident="ratelimit-web",
                           channel_timeout=60, clear_untrusted_proxy_headers=True)
    # waitress counts a thread that has not yet reached its wait for work as busy: a request
    # that came before they all had (a busy machine, right after "serving") was logged as a
    # "task queue depth" warning.  Say we serve once they wait (a few ms; at most 2 s).
    dispatcher, deadline = getattr(server, "task_dispatcher", None), time.monotonic() + 2
    while getattr(dispatcher, "active_count", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    bound = server.effective_host if hasattr(server, "effective_host") else host
    ready(host if bound in ("0.0.0.0", "::") else bound, server.effective_port)

    @parent_only
    def stop(_signum, _frame):
        # the statistics source first: that ends every /api/stream response, so the threads
        # serving them are done when waitress waits for its threads (else it logs them as
        # still running, and a late write to a closed socket as a traceback)
        app.extensions["ratelimit_stats"].stop()
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)} if main_thread else {}
    try:
        server.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.close()


def main() -> None:
    sys.exit(web_main())
