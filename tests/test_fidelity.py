"""Links that behave like the link they name, measured through the namespace lab on this kernel.

Every time is compared with the link model (``ratelimit.linkmodel``) for exactly
the bytes that crossed, within 5%: a link running 5% off its model fails.
"""

import os

import pytest

from ratelimit.kernel.probe import probe
from ratelimit.lab.core import Lab
from ratelimit.lab.link import LinkSpec

pytestmark = pytest.mark.netns

FILES = 6
SIZE = 100_000
SMALL = 10_000  # the experiment's file: six of them through one 28.8k modem take about 20 s


@pytest.fixture
def lab_maker(tmp_path, monkeypatch):
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    made = []

    def make(tag, **link):
        lab = Lab.up(f"tf{os.getpid() % 100000}_{tag}", clients=1, ports="10000-10099",
                     link=LinkSpec(profile="modem-28k8", no_delay=not probe(["netem"])["netem"], **link))
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.down()


def _parallel(lab, n=FILES, size=SIZE):
    """curl fetching ``n`` copies at once over one client; returns (total bytes, seconds, headers)."""
    urls = [lab.url(f"/{size}.bin") for _ in range(n)]
    r = lab.client(1).run(["curl", "-sS", "--parallel", "--parallel-immediate", "--parallel-max", str(n),
                           "-w", "%{size_download} %{size_header} %{time_total}\\n",
                           *sum((["-o", "/dev/null", u] for u in urls), [])], timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [tuple(float(v) for v in line.split()) for line in r.stdout.splitlines() if line.strip()]
    assert len(rows) == n and all(int(b) == size for b, _, _ in rows), rows
    return sum(int(b) for b, _, _ in rows), max(t for _, _, t in rows), [int(h) for _, h, _ in rows]


@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
def test_a_host_shares_one_modem_among_its_connections(lab_maker):
    """Per host: six parallel downloads through one 28.8k modem share it: together they take
    the time one modem needs for all their frames, within 5% (with the profile's 16 KB queue,
    six initial windows overflow it and TCP's retransmissions take part of the rate: the
    fidelity benchmark shows that)."""
    lab = lab_maker("host", queue="64kb")  # room for six initial windows: no drops, no retransmissions
    assert lab.info["link"]["summary"]["per"] == "host"
    total, seconds, headers = _parallel(lab, size=SMALL)
    model = lab.link_model()
    frames = sum(model.response_frame_bytes(SMALL, header=h) for h in headers)
    expected = model.connect_seconds() + frames * 8 / model.layer.carried_bps(model.down_bps)
    row = next(r for r in lab.statistics()["links"] if r["direction"] == "dest" and r["host"] == lab.client(1).address)
    link_rate = row["bytes"] * 8 / seconds / model.layer.carried_bps(model.down_bps)
    print(f"{FILES} x {SMALL:,} bytes at once over one 28.8k modem: {seconds:.2f} s, the model "
          f"{expected:.2f} s for {frames:,} frame bytes; the link carried {row['bytes']:,} bytes "
          f"({link_rate:.3f} of its rate), drops {row['drops']}")
    assert 0.95 < seconds / expected < 1.05 and 0.95 < link_rate < 1.05


@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
def test_per_port_gives_each_connection_its_own_modem(lab_maker):
    """Per (host, port), v0.3's model: each of the six connections is a modem of its own."""
    lab = lab_maker("port", per="port")
    total, seconds, headers = _parallel(lab, size=SMALL)
    model = lab.link_model()
    one = max(model.fetch_seconds(SMALL, header=h) for h in headers)
    print(f"{FILES} x {SMALL:,} bytes at once, a modem each: {seconds:.2f} s, one modem's model {one:.2f} s")
    assert 0.95 < seconds / one < 1.05


@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
def test_ipv6_is_shaped_like_ipv4(lab_maker):
    """The lab's nginx listens on IPv6 too, and the client's IPv6 address is a limited host."""
    lab = lab_maker("v6", rate="400kbit", queue="128kb")  # no drops: the model's time exactly
    lab.download(f"http://[{lab.server.address6}]/1000.bin")  # neighbour discovery first (costs the first SYN)
    d = lab.download(f"http://[{lab.server.address6}]/100000.bin")
    assert d.http_code == 200 and d.bytes == SIZE
    model = lab.link_model()
    # IPv6 headers are 20 bytes longer than the model's IPv4 ones: 73 segments' worth
    v6_extra = len(model.segments(SIZE + d.header_bytes)) * 20 * 8 / model.layer.carried_bps(model.down_bps)
    expected = d.model_seconds(model) + v6_extra
    rows = [r for r in lab.statistics()["links"] if r["host"] == lab.client(1).address6 and r["bytes"]]
    print(f"IPv6: {d.bytes:,} bytes in {d.seconds:.2f} s, the model {expected:.2f} s; router: {rows}")
    assert rows and rows[0]["direction"] == "dest" and rows[0]["bytes"] > SIZE
    assert 0.95 < d.seconds / expected < 1.05


def test_datagrams_cross_the_link_and_read_their_delay_at_the_kernel(lab_maker):
    """``Lab.one_way_delays``: datagrams from the limited port cross the emulated link each way
    and each reads its delay at the kernel's receive timestamp: the link's delay (none on a kernel
    without netem) plus the path's own, well under a millisecond, though one datagram in a busy
    run can take far longer (so the fastest and the median are asserted)."""
    lab = lab_maker("udp")
    model = lab.link_model()
    down, up = lab.one_way_delays(count=5)
    print(f"one-way delays, down: {[f'{s * 1000:.3f}' for s in down]} ms; up: {[f'{s * 1000:.3f}' for s in up]} ms")
    assert len(down) == len(up) == 5 and down == sorted(down) and up == sorted(up)
    for delays, delay_us in ((down, model.down_delay_us), (up, model.up_delay_us)):
        added = delay_us / 1e6 if model.delay_stage else 0.0
        assert added < delays[0] < added + 0.005 and delays[2] < added + 0.05, (added, delays)
    crossed = {r["direction"]: r["packets"] for r in lab.statistics()["links"] if r["packets"]}
    assert crossed == {"dest": 5, "source": 5}, crossed
