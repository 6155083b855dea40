"""Burst loss on a full kernel (netem's loss models, in the VM here): what a link loses, and
how many packets in a row, against the model's long-run values (``spec.lossmodel``).

A sender in the lab's server namespace sends numbered datagrams to the client, paced below
the link's rate, so that nothing but the loss model drops them.  A receiver in the client
records the numbers it gets; a missing number is a packet lost, and numbers missing in a
row are one burst.  Two readings must agree before any statistics:
- the netem stage's drop counter equals the missing numbers;
- the client's UDP receive-buffer errors stay at 0.

The bound on each value is from the run itself: the packets are cut into ``BATCHES`` batches
(each some thousand packets, far longer than a burst), and the batches' spread gives a
standard error.  A value must lie within ``SIGMAS`` standard errors of the model's, and that
bound must itself be tight: under ``TIGHT`` of the model's value, so that a link losing at
half the rate, or the same rate one packet at a time, fails.
"""

import array
import json
import math
import subprocess
import sys
import time

import pytest

from ratelimit import service
from ratelimit.spec.lossmodel import parse_loss

PORT = 5001
COUNT = 120_000  # the issue asks for at least 100,000
BATCHES = 40
SIGMAS = 3.5
TIGHT = 0.12

RECEIVE = r"""
import array, socket, sys
addr, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: room for every packet in flight
s.bind((addr, port))
print("ready", flush=True)
got = array.array("I")
s.settimeout(30)
first = True
while True:
    try:
        data = s.recv(2048)
    except socket.timeout:
        break
    if first:
        s.settimeout(3)  # 3 s without a packet once they flow: the sender is done
        first = False
    got.append(int.from_bytes(data[:4], "big"))
with open(out, "wb") as f:
    got.tofile(f)
snmp = open("/proc/net/snmp").read().split("\n")
head, values = [line.split() for line in snmp if line.startswith("Udp:")][:2]
print(dict(zip(head[1:], map(int, values[1:])))["RcvbufErrors"], flush=True)
"""

SEND = r"""
import socket, sys, time
addr, port, count, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
pad = bytes(60)
for _ in range(20):  # neighbours resolved on the way, through a port no link takes
    s.sendto(pad, (addr, 9))
time.sleep(1)
start = time.monotonic()
for seq in range(count):
    if seq % 50 == 0:
        ahead = start + seq / pps - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    s.sendto(seq.to_bytes(4, "big") + pad, (addr, port))
print(count / (time.monotonic() - start), flush=True)
"""


def _run(topo, tmp_path, count: int, pps: float) -> tuple[list[bool], int, float]:
    """Send ``count`` datagrams to the client's ``PORT``: (each one lost?, the client's
    receive-buffer errors, the packets per second sent)."""
    out = tmp_path / "got.bin"
    rx = topo.popen("client", [sys.executable, "-c", RECEIVE, topo.addr("client"), str(PORT), str(out)],
                    stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        sent = topo.exec("server", [sys.executable, "-c", SEND, topo.addr("client"), str(PORT), str(count), str(pps)],
                         timeout=900)
        errors = int(rx.communicate(timeout=120)[0].split()[-1])
    finally:
        rx.kill()
    got = array.array("I")
    got.frombytes(out.read_bytes())
    seen = bytearray(count)
    for seq in got:
        seen[seq] = 1
    return [not b for b in seen], errors, float(sent.stdout.split()[-1])


def _netem_drops(topo) -> int:
    shown = json.loads(topo.tc("-s", "-j", "qdisc", "show", "dev", topo.router_client_if).stdout)
    return sum(q.get("drops", 0) for q in shown if q["kind"] == "netem")


def _batches(lost: list[bool]) -> list[tuple[int, int]]:
    """(packets lost, bursts that start) in each of ``BATCHES`` equal batches."""
    size = len(lost) // BATCHES
    out = []
    for b in range(BATCHES):
        part = lost[b * size:(b + 1) * size]
        before = lost[b * size - 1] if b else False
        starts = sum(1 for i, x in enumerate(part) if x and not (part[i - 1] if i else before))
        out.append((sum(part), starts))
    return out


def _estimates(lost: list[bool]) -> dict:
    """The loss rate and mean burst length over the batches, each with its standard error
    (batch means; the burst length as a ratio of sums, its error by the delta method)."""
    rows = _batches(lost)
    size = len(lost) // BATCHES
    rates = [n / size for n, _ in rows]
    rate = sum(rates) / BATCHES
    rate_se = math.sqrt(sum((r - rate) ** 2 for r in rates) / (BATCHES * (BATCHES - 1)))
    losses, starts = sum(n for n, _ in rows), sum(s for _, s in rows)
    burst = losses / starts
    mean_starts = starts / BATCHES
    burst_se = math.sqrt(sum((n - burst * s) ** 2 for n, s in rows) / (BATCHES * (BATCHES - 1))) / mean_starts
    return {"rate": rate, "rate_se": rate_se, "burst": burst, "burst_se": burst_se, "losses": losses,
            "bursts": starts}


MODELS = {
    # Gilbert-Elliott with a lossy good state and a bad state that lets some through
    "gemodel": "gemodel p=2% r=20% h=20% k=99.8%",
    # the 4-state model, each of its ways taken
    "state": "state p13=2% p31=40% p32=8% p23=50% p14=1%",
}


@pytest.mark.kernel("netem", "htb", "u32")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_loss_model_loses_its_rate_in_its_bursts(lab, tmp_path, name):
    topo = lab(clients=1)
    model = parse_loss(MODELS[name], "loss")
    req = service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0],
                               ports=str(PORT), rate="500mbit", loss=MODELS[name], mode="shape", direction="dest")
    service.apply(req)
    assert req.only.down.loss_model == model
    before = _netem_drops(topo)
    t0 = time.monotonic()
    lost, errors, pps = _run(topo, tmp_path, COUNT, 6000)
    drops = _netem_drops(topo) - before
    got = _estimates(lost)
    want_rate, want_burst = model.loss_rate(), model.mean_burst_packets()
    print(f"{model.text()}: {COUNT} datagrams at {pps:.0f}/s in {time.monotonic() - t0:.0f} s; "
          f"lost {got['losses']} ({got['rate']:.4%} +- {got['rate_se']:.4%}; model {want_rate:.4%}) in "
          f"{got['bursts']} bursts of {got['burst']:.3f} +- {got['burst_se']:.3f} (model {want_burst:.3f}); "
          f"netem counted {drops} drops; the client's receive-buffer errors {errors}")
    assert errors == 0, "the client's socket dropped datagrams: the reading is not the link's"
    assert drops == sum(lost), (drops, sum(lost))
    for key, want in (("rate", want_rate), ("burst", want_burst)):
        bound = SIGMAS * got[f"{key}_se"]
        assert bound < TIGHT * want, (key, bound, want)
        assert abs(got[key] - want) <= bound, (key, got[key], want, bound)
