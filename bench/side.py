"""Run by path, under whichever checkout's ``ratelimit`` and ``webui`` PYTHONPATH names:
what ``bench stats`` measures of this checkout and of a baseline revision, side by side.

    python bench/side.py stats NETNS IFACE
        reads a line per measurement on stdin, answers each with one JSON line
        {"wall_s", "cpu_s", "links"}: one ``service.statistics`` call (the
        command line's --stats path, and the dashboard's read before the
        columnar reader existed)
    python bench/side.py serve-synthetic LINKS FORMAT
        the dashboard on 127.0.0.1 (a free port, printed as "serving URL") with
        a synthetic statistics source in which every link moves every second;
        FORMAT ``rows`` (service.statistics' dicts, what the baseline reads) or
        ``columns`` (service.counters' columns)

Imports nothing from ``bench`` (that would load this checkout's ratelimit
next to the baseline's).
"""

import json
import resource
import sys
import threading
import time


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def stats(netns: str, interface: str) -> int:
    try:
        from ratelimit.service.readout import statistics
    except ImportError:  # a baseline tree from before the subpackages (0.4.0), or before service.py was split
        try:
            from ratelimit.readout import statistics
        except ImportError:
            from ratelimit.service import statistics
    for _line in sys.stdin:
        c0, t0 = _cpu(), time.perf_counter()
        data = statistics(interface, netns)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        print(json.dumps({"wall_s": wall, "cpu_s": cpu, "links": len(data["links"])}), flush=True)
    return 0


class Synthetic:
    """``links`` links, each moving every second at its own rate (1-57 kbit/s of a
    28.8 kbit/s link); every 11th keeps a backlog."""

    def __init__(self, links: int, fmt: str):
        from array import array
        self.n, self.fmt, self.t0 = links, fmt, time.time()
        self.array = array
        self.applied = {"interface": "eth0", "netns": None, "profile": None, "mode": "shape", "direction": "both",
                        "hosts": ["198.18.0.2", "198.18.0.3"], "ports": "1024-33791", "flows": links,
                        "links": links, "per": "port",
                        "down": {"rate_bps": 28800, "frame_rate_bps": 28800},
                        "up": {"rate_bps": 28800, "frame_rate_bps": 28800}}
        self.keys = tuple(("dest" if i % 2 == 0 else "source", f"198.18.0.{2 + i // 65536}", 1024 + (i // 2) % 32768,
                           "eth0") for i in range(links))
        self.bps = [1000 + (i % 57) * 1000 for i in range(links)]
        self.backlog = array("q", [1500 if i % 11 == 1 else 0 for i in range(links)])

    def __call__(self, interface, netns=None):
        now = time.time()
        dt = now - self.t0
        nbytes = [int(dt * bps / 8) for bps in self.bps]
        packets = [b // 1000 for b in nbytes]
        if self.fmt == "columns":
            a, zero = self.array, self.array("q", bytes(8 * self.n))
            read = {"interface": interface, "netns": netns, "time": now, "applied": self.applied, "keys": self.keys,
                    "rate_bps": (28800,) * self.n,
                    "counters": {"bytes": a("q", nbytes), "packets": a("q", packets), "drops": zero,
                                 "overlimits": zero, "backlog_bytes": self.backlog, "backlog_pkts": zero}}
            try:  # the tree under test's reading: a readout.Counters since 0.4.0's subpackages, a dict before
                from ratelimit.service.readout import Counters
            except ImportError:
                return read
            return Counters(**read)
        links = [{"direction": d, "host": h, "port": p, "dev": dev, "bytes": b, "packets": pk, "drops": 0,
                  "overlimits": 0, "backlog_bytes": bl, "backlog_pkts": 0, "rate_bps": 28800}
                 for (d, h, p, dev), b, pk, bl in zip(self.keys, nbytes, packets, self.backlog)]
        return {"interface": interface, "netns": netns, "time": now, "applied": self.applied, "links": links}


def serve_synthetic(links: int, fmt: str) -> int:
    from waitress import create_server
    from webui import create_app
    from webui.stats import StatsSource
    src = StatsSource([(None, "eth0")], reader=Synthetic(links, fmt), interval=1.0)
    app = create_app({"STATS_SOURCE": src, "START_POLLING": True, "READ_ONLY": True})
    server = create_server(app, host="127.0.0.1", port=0, threads=8)
    print(f"serving http://127.0.0.1:{server.effective_port}/", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), server.close()), daemon=True).start()  # stdin closed: stop
    try:
        server.run()
    except (OSError, ValueError):
        pass
    src.stop()
    return 0


def main(argv) -> int:
    if argv[:1] == ["stats"] and len(argv) == 3:
        return stats(argv[1], argv[2])
    if argv[:1] == ["serve-synthetic"] and len(argv) == 3:
        return serve_synthetic(int(argv[1]), argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
