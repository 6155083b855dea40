"""Cells on the host kernel (router_pair namespaces): users whose own links are capped share
one cell's capacity.  Paced UDP senders in the router keep every busy user's link backlogged;
each link's rate is read from its kernel counters over a window (``--stats``), against the
cell's model: user i gets min(its own cap, the max-min fair share of the cell)."""

import subprocess
import time

import pytest

from bench import blast
from bench.shaped_load import PACE
from ratelimit import service
from ratelimit.service import readout

pytestmark = pytest.mark.netns

USERS = [f"198.18.1.{i}" for i in range(2, 12)]  # the client of router_pair and nine more
PAYLOAD_BYTES = 1000
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14  # what a class counts of each: UDP, IPv4, Ethernet
WARM_S, WINDOW_S = 1.5, 3.0


def jain(xs) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def backlog(router: str, client: str, busy: list[str], offered_bps: float, cell: str, rate: str = "4mbit") -> dict:
    """Apply ten per-host links of ``rate`` in ``cell`` on r0, keep ``busy`` backlogged at
    ``offered_bps`` each, and read each link's delivered rate (bit/s, its frames) over a window."""
    sender = blast.compiled(PACE)
    assert sender, "pace.c needs a C compiler (apt-get install gcc)"
    for a in USERS[1:]:
        subprocess.run(["ip", "-n", client, "addr", "add", f"{a}/24", "dev", "c0"], check=True, capture_output=True)
    for a in USERS:  # every neighbour resolved before the window: no ARP through the links meanwhile
        subprocess.run(["ip", "netns", "exec", router, "ping", "-c", "1", "-W", "2", a], check=True,
                       capture_output=True)
    service.apply(service.make_request("r0", netns=router, hosts=",".join(USERS), per="host", rate=rate,
                                       mode="shape", direction="dest", cell=cell))
    pps = offered_bps / (FRAME_BYTES * 8)
    senders = [subprocess.Popen(["ip", "netns", "exec", router, sender, a, "9", "1", str(PAYLOAD_BYTES),
                                 f"{pps:.1f}", f"{WARM_S + WINDOW_S + 1:g}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for a in busy]
    try:
        time.sleep(WARM_S)
        t0, before = time.monotonic(), _bytes(router)
        time.sleep(WINDOW_S)
        t1, after = time.monotonic(), _bytes(router)
    finally:
        for p in senders:
            p.communicate(timeout=30)
    return {h: (after[h] - before.get(h, 0)) * 8 / (t1 - t0) for h in after}


def _bytes(router: str) -> dict:
    return {r["host"]: r["bytes"] for r in readout.statistics("r0", router)["links"] if r["direction"] == "dest"}


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_a_full_cell_splits_its_capacity_fairly_below_each_users_cap(router_pair):
    """Ten backlogged users, each capped at 4 Mbit/s, in a 20 Mbit/s cell: each gets the
    fair share, 2 Mbit/s, within 3% (Jain's index at least 0.99), and the cell delivers at
    least 98% of its capacity."""
    router, client = router_pair
    rates = backlog(router, client, USERS, 6e6, "20mbit")
    got = [rates[h] for h in USERS]
    print({h: round(r / 1e6, 3) for h, r in rates.items()})
    assert all(abs(r / 2e6 - 1) <= 0.03 for r in got), got
    assert jain(got) >= 0.99
    assert 0.98 <= sum(got) / 20e6 <= 1.02


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_two_busy_users_in_a_cell_with_room_each_get_their_own_cap(router_pair):
    """Two backlogged users of the same ten in the 20 Mbit/s cell: each gets its own 4 Mbit/s
    cap within 2%; the idle ones nothing."""
    router, client = router_pair
    rates = backlog(router, client, USERS[:2], 6e6, "20mbit")
    print({h: round(r / 1e6, 3) for h, r in rates.items()})
    assert all(abs(rates[h] / 4e6 - 1) <= 0.02 for h in USERS[:2]), rates
    assert all(rates[h] < 20_000 for h in USERS[2:]), rates  # at most a stray frame or two


def test_a_cell_is_refused_in_one_line_and_the_router_left_as_it_was(router_pair):
    router, _ = router_pair
    before = subprocess.run(["tc", "-n", router, "qdisc", "show"], capture_output=True, text=True).stdout
    for cell, message in (("fast", "--cell: 'fast' is not a rate"),
                          ("20mbit/", "--cell: '20mbit/' is not a cell's capacity (DOWN or DOWN/UP"),
                          ("", "--cell: '' is not a cell's capacity")):
        with pytest.raises(Exception, match="^" + message.replace("(", r"\(")):
            service.apply(service.make_request("r0", netns=router, hosts=USERS[0], per="host", rate="4mbit",
                                               mode="shape", cell=cell))
    with pytest.raises(Exception, match=r"^cell main: needs --mode shape"):
        service.apply(service.make_request("r0", netns=router, hosts=USERS[0], per="host", rate="4mbit",
                                           mode="police", cell="20mbit"))
    with pytest.raises(Exception, match=r"^cell main: cohort main has 300 links, more than one group holds \(256\)"):
        service.apply(service.make_request("r0", netns=router, hosts="198.18.1.2", ports="10000-10299",
                                           rate="4mbit", mode="shape", cell="20mbit"))
    assert subprocess.run(["tc", "-n", router, "qdisc", "show"], capture_output=True, text=True).stdout == before
