"""In a router VM of the Vagrant lab: the link one client connection crossed, and its model.

    sudo /opt/ratelimit/bin/python /vagrant/vagrant/linkmodel.py --host 198.18.1.11 --port 10512 --bytes 10000

prints one JSON object: where the link is (interface), what is applied there
(profile, mode, rate, burst, delay), the time the link's model gives for a
download of ``--bytes`` from connect to last byte (``model_s``), the 2000 theory
(bytes x 8 / rate), and
the router's counters for that (host, port) in both directions.  ``vagrant/demo.py``
runs it on the client's router after each download.  It uses ratelimit as
installed in the VM from the checkout (router.sh), so the model is the
checkout's, never arithmetic of its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from ipaddress import ip_address

from ratelimit.service import readout
from ratelimit.spec import summary
from ratelimit.spec.linkmodel import LinkModel
from ratelimit.state import records


def link_model(payload: int, req, cohort, *, header: int, request: int) -> dict:
    """THE one call site for the link's model in the Vagrant lab: of ``cohort``, one of ``req``'s.

    Returns ``model_s`` (connect to last byte of one fetch), ``source``, and what
    the printout explains (``wire_bytes``: the response's link-layer frames,
    ``burst_bytes``)."""
    model = LinkModel.from_summary(summary.summary(req), cohort=cohort.name if len(req.cohorts) > 1 else None)
    rate = model.layer.carried_bps(cohort.down.rate_bps)
    return {"model_s": model.fetch_seconds(payload, header=header, request=request),
            "source": "ratelimit.spec.linkmodel.LinkModel.fetch_seconds", "link_layer": model.layer.name,
            "wire_bytes": model.response_frame_bytes(payload, header=header),
            "burst_bytes": req.burst_bytes(cohort.down, rate, cohort)}


def find_request(host: str):
    """The applied request (state) with a cohort whose hosts include ``host``, on any
    interface, and that cohort; (None, None) if there is none."""
    addr = ip_address(host)
    for interface in records.interfaces(None):
        record = records.load(None, interface)
        req = record.request if record is not None else None
        for cohort in req.cohorts if req is not None else ():
            if addr in cohort.hosts:
                return req, cohort
    return None, None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="linkmodel.py", description=__doc__.splitlines()[0])
    p.add_argument("--host", required=True, help="the client's address")
    p.add_argument("--port", type=int, required=True, help="the client's port of the connection")
    p.add_argument("--bytes", type=int, required=True, help="payload of the download")
    p.add_argument("--header-bytes", type=int, default=0, help="the response's HTTP header (curl's size_header)")
    p.add_argument("--request-bytes", type=int, default=0, help="the HTTP request (curl's size_request)")
    args = p.parse_args(argv)
    if not 1 <= args.port <= 65535:
        p.error(f"--port: {args.port} is not a port (1-65535)")
    if args.bytes < 1:
        p.error(f"--bytes: {args.bytes} is not a size (at least 1)")
    if not 0 <= args.header_bytes <= 65536 or not 0 <= args.request_bytes <= 65536:
        p.error("--header-bytes, --request-bytes: not a size (0-65536)")
    try:
        ip_address(args.host)
    except ValueError:
        p.error(f"--host: '{args.host}' is not an IP address")

    req, cohort = find_request(args.host)
    if req is None:
        print(f"linkmodel.py: ratelimit has no link for {args.host} on this machine "
              f"(interfaces with a configuration: {', '.join(records.interfaces(None)) or 'none'})", file=sys.stderr)
        return 3
    if cohort.down.rate_bps is None:
        print(f"linkmodel.py: the link for {args.host} on {req.interface} has no rate", file=sys.stderr)
        return 3
    stats = readout.statistics(req.interface)
    links = [r for r in stats["links"] if r["host"] == args.host and r["port"] == args.port]
    model = link_model(args.bytes, req, cohort, header=args.header_bytes, request=args.request_bytes)
    out = {
        "interface": req.interface,
        "profile": cohort.profile,
        "mode": req.mode,
        "rate_bps": cohort.down.rate_bps,
        "burst": req.burst_of(cohort.down, cohort).text(),
        "burst_bytes": model["burst_bytes"],
        "delay_ms": {"down": cohort.down.delay_us / 1000, "up": cohort.up.delay_us / 1000},
        "bytes": args.bytes,
        "wire_bytes": model["wire_bytes"],
        "model_s": model["model_s"],
        "link_layer": model["link_layer"],
        "model_source": model["source"],
        "theory_s": args.bytes * 8 / cohort.down.rate_bps,
        "links": [{k: r[k] for k in ("direction", "host", "port", "bytes", "packets", "drops", "overlimits")}
                  for r in links],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
