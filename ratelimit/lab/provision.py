"""What ``lab up`` adds to the topology (``topology``) to make it a lab, and the checks of
its arguments.

- Clients' ephemeral ports: ``vagrant/provision/client.sh`` runs in every client namespace
  and sets ``net.ipv4.ip_local_port_range`` to the lab's ports (default ``DEFAULT_PORTS``),
  the very range the router limits, so every connection a client opens is an emulated link.
- A web server in the server namespace: ``vagrant/provision/server.sh`` writes the
  fixed-size files (``docroot``) and starts a private nginx (its own configuration, pid and
  logs in the lab directory) or the built-in server; then the server's TCP start
  (``servertcp``): its RTO floor, initial window and congestion control.
- Lab names in ``/etc/netns/NS/hosts`` (``ip netns exec`` shows that file as ``/etc/hosts``),
  so ``curl http://server/10000.bin`` works on a client.

For example, ``check_ports("10000-10999")`` is ``(10000, 10999)``, and ``check_ports("80-90")``
raises ``FieldError`` (ephemeral ports start at 1024).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .. import SOURCE_ROOT
from ..errors import FieldError, NotFoundError, RatelimitError
from ..kernel.netns import parent_only
from ..spec.selectors import parse_ports
from ..spec.units import whole_number
from . import servertcp, topology
from .link import check_choice, in_vm, Say
from .store import HOSTS_DIR

DEFAULT_PORTS = "10000-10999"  # the clients' ephemeral range = the range the router limits
SERVER_PORT = 80
SERVERS = ("auto", "nginx", "builtin", "none")


class LabError(RatelimitError):
    """A lab step failed (the message says which and what was left)."""


# ---------------------------------------------------------------- the checks of lab up


def check_clients(clients) -> int:
    n = whole_number(clients)
    if n is None:
        raise FieldError("--clients", f"'{clients}'" if isinstance(clients, str) else clients,
                         f"is not a whole number (1-{topology.MAX_CLIENTS})")
    if not 1 <= n <= topology.MAX_CLIENTS:
        raise FieldError("--clients", n, f"is more than the address plan holds (1-{topology.MAX_CLIENTS}: "
                         f"clients are {topology.LAN4}.2-{topology.LAN4}.{topology.MAX_CLIENTS + 1})"
                         if n > 0 else f"is not a number of clients (1-{topology.MAX_CLIENTS})")
    return n


def check_ports(ports: str) -> tuple[int, int]:
    """One range LOW-HIGH within 1024-65535: the clients' ephemeral ports."""
    parsed = parse_ports(ports, "--ports")
    if len(parsed) != 1 or parsed[0][0] == parsed[0][1]:
        raise FieldError("--ports", f"'{ports}'", "is not one range LOW-HIGH (the clients' ephemeral ports)")
    lo, hi = parsed[0]
    if lo < 1024:
        raise FieldError("--ports", f"'{ports}'", "starts below 1024 (ephemeral ports must be 1024-65535)")
    return lo, hi


def server_kind(server: str) -> str:
    """What ``--server`` runs: ``auto`` is nginx when it is installed, else the built-in server."""
    check_choice("--server", server, SERVERS)
    if server == "none":
        return server
    have_nginx = shutil.which("nginx") is not None
    if server == "auto":
        return "nginx" if have_nginx else "builtin"
    if server == "nginx" and not have_nginx:
        raise NotFoundError("--server: nginx is not installed (apt-get install nginx-light, "
                            "or use --server builtin)")
    return server


def client_addrs(topo: topology.Topology) -> list[tuple[str, str]]:
    """Each client's (IPv4, IPv6) address, in order: what the router limits."""
    return list(zip(topo.client_addrs, topo.client_addrs6))


# ---------------------------------------------------------------- provisioning


def provision(host, script: Path, **env) -> None:
    """Run the provisioning ``script`` on ``host`` (a ``core.Host``) with only ``env`` and a
    PATH; ``LabError`` with its last line of errors if it fails."""
    timeout = 600 if in_vm() else 120  # software emulation is slow
    try:
        r = host.run(["env", "-i", f"PATH={os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
                      *(f"{k}={v}" for k, v in env.items()), "sh", str(script)], timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"lab up: {script.name} on {host.name} did not finish within {timeout} s") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exited {r.returncode}"])[-1]
        raise LabError(f"lab up: {script.name} on {host.name} failed: {last}")


def provision_server(lab, scripts: Path, say: Say) -> None:
    """The web server of ``lab`` (unless ``--server none``), then the server's TCP start
    (``servertcp``) over whatever server.sh set: provisioning the server again starts its
    TCP the same way.  Both go into ``lab.info["server"]``."""
    server, kind = lab.info["server"], lab.info["server"]["kind"]
    if kind != "none":
        say(f"lab up: {kind} server on http://{lab.server.address}/ via {scripts / 'server.sh'}")
        provision(lab.server, scripts / "server.sh", RL_INSTALL="0", RL_SERVER=kind,
                  RL_SRC=str(SOURCE_ROOT), RL_PYTHON=sys.executable, RL_LAB_DIR=lab.info["dir"],
                  RL_PORT=str(SERVER_PORT), RL_NGINX_USER="root",
                  RL_WORKERS=str(min(os.cpu_count() or 1, 4)))
        server["pid"] = server_pid(lab.info)
    server["tcp"] = servertcp.apply(lab.server.netns, server["tcp"]["name"])
    say(f"lab up: server TCP: {servertcp.describe(server['tcp'])}")


def server_pid(info: dict) -> int | None:
    """The web server's pid from its pid file in the lab directory, waiting up to 2.5 s for
    it; None if it does not come."""
    kind = info["server"]["kind"]
    pidfile = Path(info["dir"]) / kind / ("nginx.pid" if kind == "nginx" else "server.pid")
    for _ in range(50):
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.05)
    return None


def write_hosts_files(lab) -> None:
    """``/etc/netns/NS/hosts`` for every namespace of ``lab``: lab names resolve inside.
    IPv4 only: the router limits the clients' IPv4 addresses."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback",
             f"{lab.server.address} server", f"{lab.router.address} router"]
    lines += [f"{c.address} {c.name}" for c in lab.clients]
    text = "# written by ratelimit lab; removed by `ratelimit lab down`\n" + "\n".join(lines) + "\n"
    for ns in lab.topo.namespaces:
        d = HOSTS_DIR / ns
        try:
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text(text)
        except OSError:  # a read-only /etc: names just do not resolve
            return


@contextmanager
def terminate_as_exception():
    """SIGTERM (and SIGHUP) during ``lab up`` unwinds like Ctrl-C, so it cleans up."""
    @parent_only
    def raise_(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    try:
        old = {s: signal.signal(s, raise_) for s in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
