#!/usr/bin/env python3
"""The Vagrant lab's demos, run from the host against a lab that is up.

    python3 vagrant/demo.py [fetch] [--client N] [--runs K]    # the 10,000-byte download, measured vs model
    python3 vagrant/demo.py dialup [--sessions X] [--seconds S] # x dial-up clients across every router
    python3 vagrant/demo.py targets                              # Prometheus' view of the routers
    python3 vagrant/demo.py inventory > lab.json                 # the routers, an Ansible inventory

Pass the lab's RL_* variables, as to every vagrant command of that lab (they
define the machines).  Add ``--json`` for the numbers as one JSON object.

``fetch`` is ``ratelimit lab demo`` across VMs: clientN downloads the file of
the 2000 experiments from the server with curl; its router (linkmodel.py, with
the ratelimit installed there) reports what link that connection crossed, the
link's model time (``ratelimit.spec.linkmodel``: handshake, request, the response's
link-layer frames at the link's rate, the profile's delays) and its counters.
Measured is curl's download from connect to last byte (its total less its
lookup of the server's name), which is what the model describes.

``dialup`` starts X closed-loop httperf sessions (``--wsess``, one new
connection per fetch, so many links come and go), spread over the clients and so over
their routers, and while they run asks the lab's Prometheus for each router's
rate and drops (the PromQL of docs/lab.md).

``inventory`` prints the lab's routers as an Ansible inventory (JSON) for a fleet apply
(docs/fleet.md): the inventory Prometheus' targets come from (the server keeps it in
``INVENTORY``), with each router's connection from ``vagrant ssh-config`` and root by sudo.

Machines are reached with ``vagrant ssh-config`` once and plain ssh after
that (one ``vagrant ssh`` costs 2-4 s of Ruby start-up).  Exit status: 0, or 1
with a one-line reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER_ADDR = "198.19.0.2"
PROMETHEUS = f"http://{SERVER_ADDR}:9090"
FILE = "10000.bin"
FILE_BYTES = 10_000
VM_PYTHON = "/opt/ratelimit/bin/python"
LINKMODEL = "/vagrant/vagrant/linkmodel.py"
INVENTORY = "/etc/ratelimit-lab/inventory.json"  # on the server (provision/prometheus.sh)
TOLERANCE = 0.05  # what "matches the model" means in the printout (and in tests/test_vagrant_lab.py)

# PromQL for the routers (docs/lab.md explains them); Prometheus scrapes every 10 s,
# so a rate over 30 s has three samples and survives one slow scrape
WINDOW = "30s"
Q_ROUTER_BPS = f'sum by (router, direction) (rate(ratelimit_bytes_total{{job="ratelimit"}}[{WINDOW}])) * 8'
Q_ROUTER_DROPS = f'sum by (router, direction) (rate(ratelimit_drops_total{{job="ratelimit"}}[{WINDOW}]))'
Q_ACTIVE_LINKS = 'sum by (router) (ratelimit_active_links{job="ratelimit"})'
Q_SCRAPE = 'scrape_duration_seconds{job="ratelimit"} * up{job="ratelimit"}'  # 0: the last scrape failed


class DemoError(Exception):
    """A demo could not run; the message says why, for the person at the terminal."""


# ---------------------------------------------------------------- reaching the VMs

class Lab:
    """The running lab's machines, by name, reached over ssh."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        env = dict(os.environ)
        env.setdefault("VAGRANT_CWD", str(HERE))
        env.setdefault("VAGRANT_CHECKPOINT_DISABLE", "1")
        r = subprocess.run(["vagrant", "ssh-config"], env=env, capture_output=True, text=True, timeout=180)
        if r.returncode != 0 or "HostName" not in r.stdout:
            why = (r.stderr.strip().splitlines() or ["no machine is running"])[-1]
            raise DemoError(f"vagrant ssh-config: {why} (is the lab up? cd vagrant && vagrant up)")
        self.config = workdir / "ssh-config"
        self.config.write_text(r.stdout)
        self.machines = re.findall(r"^Host (\S+)$", r.stdout, re.MULTILINE)
        self.ssh_options = {m: dict(re.findall(r"^  (\w+) (.+)$", block, re.MULTILINE))
                            for m, block in zip(self.machines, re.split(r"^Host \S+$", r.stdout, flags=re.M)[1:])}

    def names(self, kind: str) -> list[str]:
        return sorted((m for m in self.machines if re.fullmatch(rf"{kind}[0-9]+", m)),
                      key=lambda m: int(m[len(kind):]))

    def ssh(self, machine: str, command: str, *, timeout: float = 120, check: bool = True):
        if machine not in self.machines:
            raise DemoError(f"{machine}: not a machine of this lab (machines: {', '.join(self.machines)})")
        argv = ["ssh", "-F", str(self.config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", machine, command]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DemoError(f"{machine}: '{command}' did not finish in {timeout:g} s") from None
        if check and r.returncode != 0:
            why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
            raise DemoError(f"{machine}: {command.split()[0]} failed: {why}")
        return r

    def promql(self, query: str) -> list[dict]:
        """An instant PromQL query, asked on the server (Prometheus listens on the lab network)."""
        cmd = (f"curl -sS --max-time 20 -G --data-urlencode {shlex.quote('query=' + query)} "
               f"{PROMETHEUS}/api/v1/query")
        r = self.ssh("server", cmd, timeout=60)
        data = json.loads(r.stdout)
        if data.get("status") != "success":
            raise DemoError(f"Prometheus refused '{query}': {data.get('error', data)}")
        return data["data"]["result"]


def _router_of(lab: Lab, client: str) -> tuple[str, str]:
    """(router machine, client address) from the client's own route to the server."""
    out = lab.ssh(client, f"ip -o -4 route get {SERVER_ADDR}").stdout
    via = re.search(r"\bvia (198\.18\.([0-9]+)\.2)\b", out)
    src = re.search(r"\bsrc ([0-9.]+)", out)
    if not via or not src:
        raise DemoError(f"{client}: no route to the server through a router ({out.strip()!r})")
    return f"router{via.group(2)}", src.group(1)


# ---------------------------------------------------------------- fetch

def fetch(lab: Lab, client: int, runs: int) -> dict:
    name = f"client{client}"
    router, client_addr = _router_of(lab, name)
    results = []
    for i in range(runs):
        if i:
            time.sleep(1.0)  # the next connection gets a fresh port and a full bucket anyway
        curl = (f"curl -sS -o /dev/null --max-time 60 -w '%{{json}}' http://server/{FILE}")
        w = json.loads(lab.ssh(name, curl).stdout)
        if w.get("http_code") != 200 or int(w.get("size_download", 0)) != FILE_BYTES:
            raise DemoError(f"{name}: the download returned HTTP {w.get('http_code')} and "
                            f"{w.get('size_download')} bytes, not 200 and {FILE_BYTES:,}")
        port = int(w["local_port"])
        link = json.loads(lab.ssh(router, f"sudo {VM_PYTHON} {LINKMODEL} --host {client_addr} "
                                          f"--port {port} --bytes {FILE_BYTES} "
                                          f"--header-bytes {int(w.get('size_header', 0))} "
                                          f"--request-bytes {int(w.get('size_request', 0))}").stdout)
        # connect to last byte, what the model describes: curl's times count from before it
        # looks the server's name up (/etc/hosts, a slow process in a software-emulated guest)
        lookup = float(w["time_namelookup"])
        measured = float(w["time_total"]) - lookup
        results.append({
            "port": port, "lookup_s": lookup, "connect_s": float(w["time_connect"]) - lookup,
            "first_byte_s": float(w["time_starttransfer"]) - lookup,
            "measured_s": measured, "ratio": measured / link["model_s"], "link": link,
        })
    ratios = [r["ratio"] for r in results]
    return {"client": name, "client_addr": client_addr, "router": router, "file": FILE,
            "bytes": FILE_BYTES, "runs": results, "median_ratio": statistics.median(ratios),
            "tolerance": TOLERANCE}


def print_fetch(d: dict) -> None:
    link = d["runs"][0]["link"]
    rate = link["rate_bps"]
    print(f"vagrant lab demo: {d['client']} downloads the {d['bytes']:,}-byte file of the 2000 experiments "
          f"from the server through {d['router']} ({link['profile'] or 'custom link'}, {link['mode']}, "
          f"{rate / 1000:g} kbit/s, {link['delay_ms']['down']:g} ms each way).")
    print(f"$ vagrant ssh {d['client']} -c 'curl -o /dev/null http://server/{d['file']}'")
    for i, r in enumerate(d["runs"], 1):
        m = r["link"]
        within = "within" if abs(r["ratio"] - 1) <= d["tolerance"] else "NOT within"
        print()
        if len(d["runs"]) > 1:
            print(f"  run {i}")
        print(f"  measured   {r['measured_s']:5.2f} s   curl on {d['client']}, port {r['port']} "
              f"(TCP handshake {r['connect_s'] * 1000:.0f} ms; before it, the name's lookup {r['lookup_s'] * 1000:.0f} ms)")
        print(f"  model      {m['model_s']:5.2f} s   this link: handshake, request and {m['wire_bytes']:,} bytes "
              f"of {m['link_layer']} frames at the line's {rate:,} bit/s, with the delays ({m['model_source']})")
        print(f"  ratio      {r['ratio']:5.3f}     measured / model: {within} {d['tolerance']:.0%}")
        print(f"  theory     {m['theory_s']:5.2f} s   {d['bytes']:,} bytes x 8 / {rate:,} bit/s, as in 2000")
        rows = sorted(m["links"], key=lambda row: row["direction"])
        if rows:
            print(f"  link statistics on {d['router']} ({m['interface']}), the connection's (host, port):")
            print(f"  {'DIR':<5} {'HOST':<13} {'PORT':>6} {'BYTES':>8} {'PACKETS':>8} {'DROPS':>6} {'OVERLIM':>8}")
            for row in rows:
                print(f"  {'down' if row['direction'] == 'dest' else 'up':<5} {row['host']:<13} {row['port']:>6} "
                      f"{row['bytes']:>8,} {row['packets']:>8,} {row['drops']:>6,} {row['overlimits']:>8,}")
    if len(d["runs"]) > 1:
        print()
        print(f"  median measured / model over {len(d['runs'])} runs: {d['median_ratio']:.3f}")


# ---------------------------------------------------------------- dial-up

def _vector(result: list[dict]) -> dict[str, float]:
    return {r["metric"].get("router", r["metric"].get("instance", "?")): float(r["value"][1]) for r in result}


def _by_direction(result: list[dict]) -> dict[str, dict[str, float]]:
    """{router: {"down": x, "up": y, "both": x + y}} from a query by (router, direction)."""
    out: dict[str, dict[str, float]] = {}
    for r in result:
        side = "down" if r["metric"].get("direction") == "dest" else "up"
        row = out.setdefault(r["metric"].get("router", "?"), {"down": 0.0, "up": 0.0, "both": 0.0})
        row[side] += float(r["value"][1])
        row["both"] += float(r["value"][1])
    return out


def dialup(lab: Lab, sessions: int, seconds: int) -> dict:
    clients = lab.names("client")
    routers = lab.names("router")
    if not clients or not routers:
        raise DemoError(f"dialup: the lab has {len(clients)} client(s) and {len(routers)} router(s); needs both")
    if sessions < len(clients):
        raise DemoError(f"--sessions: {sessions} is fewer than the {len(clients)} clients")
    share = {c: sessions // len(clients) + (1 if i < sessions % len(clients) else 0)
             for i, c in enumerate(clients)}
    behind = {c: _router_of(lab, c)[0] for c in clients}
    runs: dict[str, str] = {}
    errors: list[str] = []

    def run(client: str) -> None:
        s = share[client]
        # closed-loop sessions of one fetch per new connection (HTTP/1.0), started at s/2 per second;
        # SIGINT at the end makes httperf print its report.  Never --hog (it escapes the port range).
        cmd = (f"timeout -s INT {seconds} httperf --server server --uri /{FILE} --http-version=1.0 "
               f"--wsess={s},1000,0 --rate {max(1, s // 2)} --timeout 30; true")
        try:
            runs[client] = lab.ssh(client, cmd, timeout=seconds + 60).stdout
        except DemoError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    started = time.monotonic()
    for t in threads:
        t.start()
    # ask Prometheus near the end of the run: rates over the last 30 s
    time.sleep(max(0.0, seconds - 3 - (time.monotonic() - started)))
    during = {"window": WINDOW, "asked_after_s": round(time.monotonic() - started, 1),
              "bps": _by_direction(lab.promql(Q_ROUTER_BPS)),
              "drops_per_s": _by_direction(lab.promql(Q_ROUTER_DROPS)),
              "active_links": _vector(lab.promql(Q_ACTIVE_LINKS)),
              "scrape": {r["metric"].get("router", "?"): float(r["value"][1]) for r in lab.promql(Q_SCRAPE)}}
    for t in threads:
        t.join()
    if errors:
        raise DemoError("; ".join(errors))
    httperf = {}
    for c, text in runs.items():
        m = re.search(r"^Total: connections ([0-9]+) requests ([0-9]+) replies ([0-9]+) test-duration ([0-9.]+) s",
                      text, re.MULTILINE)
        httperf[c] = ({"connections": int(m.group(1)), "replies": int(m.group(3)), "duration_s": float(m.group(4))}
                      if m else {"report": text[-300:]})
    return {"sessions": sessions, "seconds": seconds, "clients": share, "routers": routers, "behind": behind,
            "prometheus": during, "httperf": httperf,
            "queries": {"bps": Q_ROUTER_BPS, "drops_per_s": Q_ROUTER_DROPS, "active_links": Q_ACTIVE_LINKS,
                        "scrape": Q_SCRAPE}}


def print_dialup(d: dict) -> None:
    print(f"vagrant lab dial-up: {d['sessions']} httperf sessions for {d['seconds']} s, "
          + ", ".join(f"{n} on {c} (behind {d['behind'][c]})" for c, n in d["clients"].items()))
    p = d["prometheus"]
    print(f"Prometheus ({PROMETHEUS}), {p['asked_after_s']:g} s into the run, rates over the last {p['window']}:")
    print(f"  {d['queries']['bps']}")
    print(f"  {'ROUTER':<9} {'DOWN kbit/s':>12} {'UP kbit/s':>10} {'DROPS/s':>8} {'ACTIVE LINKS':>13} {'SCRAPE':>8}")
    zero = {"down": 0.0, "up": 0.0, "both": 0.0}
    for r in d["routers"]:
        bps, drops = p["bps"].get(r, zero), p["drops_per_s"].get(r, zero)
        scrape = p["scrape"].get(r)
        shown = "down" if scrape == 0 else (f"{scrape:.2f} s" if scrape is not None else "?")
        print(f"  {r:<9} {bps['down'] / 1000:>12.1f} {bps['up'] / 1000:>10.1f} {drops['both']:>8.2f} "
              f"{p['active_links'].get(r, 0):>13.0f} {shown:>8}")
    for c, h in d["httperf"].items():
        if "replies" in h:
            print(f"  httperf on {c}: {h['replies']} replies on {h['connections']} connections in {h['duration_s']:.1f} s")
        else:
            print(f"  httperf on {c}: no report ({h['report']!r})")


# ---------------------------------------------------------------- targets

def targets(lab: Lab) -> dict:
    r = lab.ssh("server", f"curl -sS --max-time 20 {PROMETHEUS}/api/v1/targets", timeout=60)
    active = json.loads(r.stdout)["data"]["activeTargets"]
    return {"targets": [{"router": t["labels"].get("router"), "instance": t["labels"]["instance"],
                         "health": t["health"], "last_error": t.get("lastError", ""),
                         "last_scrape": t.get("lastScrape")} for t in active],
            "up": _vector(lab.promql('up{job="ratelimit"}'))}


def print_targets(d: dict) -> None:
    print(f"Prometheus targets ({PROMETHEUS}/targets):")
    for t in sorted(d["targets"], key=lambda t: t["router"] or ""):
        print(f"  {t['router'] or '?':<9} {t['instance']:<20} {t['health']:<8} up={d['up'].get(t['router'], 0):g}"
              f"{'  ' + t['last_error'] if t['last_error'] else ''}")


# ---------------------------------------------------------------- inventory

def inventory(lab: Lab) -> dict:
    """The lab's routers as an Ansible inventory: the server's copy of the lab's (each router's
    ``ratelimit``), and how to reach each router (``vagrant ssh-config``; root by sudo)."""
    hosts = json.loads(lab.ssh("server", f"cat {INVENTORY}").stdout)["routers"]["hosts"]
    for name, host in hosts.items():
        if name not in lab.machines:
            raise DemoError(f"{name}: in the lab's inventory but not running (vagrant up {name})")
        o = lab.ssh_options[name]
        host.update(ansible_host=o["HostName"], ansible_port=int(o.get("Port", 22)), ansible_user=o["User"],
                    ansible_ssh_private_key_file=o["IdentityFile"].strip('"'))
    return {"routers": {"hosts": hosts, "vars": {
        "ansible_become": True, "ansible_python_interpreter": VM_PYTHON,
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}}}


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="demo.py", description="The Vagrant lab's demos (see the module docstring).")
    p.add_argument("what", nargs="?", default="fetch", choices=["fetch", "dialup", "targets", "inventory"])
    p.add_argument("--client", type=int, default=1, help="fetch: the client that downloads (default 1)")
    p.add_argument("--runs", type=int, default=1, help="fetch: downloads, one after another (default 1, 1-20)")
    p.add_argument("--sessions", type=int, default=100, help="dialup: x, httperf sessions in all (default 100)")
    p.add_argument("--seconds", type=int, default=40, help="dialup: how long they run (default 40, 35-600)")
    p.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = p.parse_args(argv)
    if not 1 <= args.client <= 200:
        p.error(f"--client: {args.client} is not a client number (1-200)")
    if not 1 <= args.runs <= 20:
        p.error(f"--runs: {args.runs} is out of range (1-20)")
    if not 1 <= args.sessions <= 3600:
        p.error(f"--sessions: {args.sessions} is out of range (1-3600)")
    if not 35 <= args.seconds <= 600:
        p.error(f"--seconds: {args.seconds} is out of range (35-600: the rates cover the last 30 s)")
    try:
        with tempfile.TemporaryDirectory(prefix="ratelimit-vagrant-demo-") as tmp:
            lab = Lab(Path(tmp))
            if args.what == "fetch":
                data, show = fetch(lab, args.client, args.runs), print_fetch
            elif args.what == "dialup":
                data, show = dialup(lab, args.sessions, args.seconds), print_dialup
            elif args.what == "targets":
                data, show = targets(lab), print_targets
            else:  # JSON either way: what ansible-playbook -i reads
                data, show = inventory(lab), lambda d: print(json.dumps(d, indent=1))
    except DemoError as e:
        print(f"demo.py: {e}", file=sys.stderr)
        return 1
    except (subprocess.TimeoutExpired, ValueError, KeyError) as e:
        print(f"demo.py: unexpected answer from the lab: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data))
    else:
        show(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
