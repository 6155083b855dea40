"""The configuration dump tests compare before and after: what tc says about devices,
counters aside."""

import re
import subprocess


def tc_dump(ns: str, *devs: str) -> list[str]:
    """Every qdisc, class and filter ``tc -d`` shows on ``devs`` in namespace ``ns``, and
    which of them exist, with counters and statistics left out."""
    def sh(*argv):
        return subprocess.run(argv, capture_output=True, text=True)
    out = []
    for dev in devs:
        if sh("ip", "-n", ns, "link", "show", "dev", dev).returncode:
            out.append(f"{dev}: absent")
            continue
        for what in (("qdisc", "show", "dev", dev), ("class", "show", "dev", dev),
                     ("filter", "show", "dev", dev), ("filter", "show", "dev", dev, "ingress")):
            out.append(re.sub(r"direct_packets_stat \d+", "", sh("tc", "-n", ns, "-d", *what).stdout))
    return out
