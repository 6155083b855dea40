"""The device's pool (--bandwidth) against what its links' rates add up to: the warning every
apply gives when they add up to more, and the lab's default that carries them."""

import io

import pytest

from ratelimit.cli.main import Console, main
from ratelimit.lab.link import LinkSpec, resolve_link
from ratelimit.plan.layout import links_rate_bps, oversubscribed
from ratelimit.service import make_request

CLIENTS = (("198.18.0.2", "2001:db8::2"), ("198.18.0.3", "2001:db8::3"))


def _req(ports="10000-10099", rate="1mbit", **kw):
    return make_request("eth0", hosts=["198.18.0.2"], ports=ports, rate=rate, **kw)


def test_the_links_rates_add_up_per_direction_the_pool_holds():
    assert links_rate_bps(_req(mode="shape")) == {"dest": 100_000_000, "source": 100_000_000}
    assert links_rate_bps(_req(mode="shape", direction="dest")) == {"dest": 100_000_000}
    # police mode polices the source on the ingress qdisc, which has no pool
    assert links_rate_bps(_req(mode="police")) == {"dest": 100_000_000}


def test_no_warning_while_the_pool_carries_every_link():
    assert oversubscribed(_req(mode="shape")) is None  # 100 x 1 Mbit/s = the default 100 Mbit/s


def test_the_warning_names_the_sum_the_pool_and_what_carries_them():
    req = _req(ports="10000-10100", mode="shape", direction="dest", rate="28.8kbit", bandwidth="1mbit")
    assert oversubscribed(req) == (
        "--bandwidth: the 101 links' rates add up to 2908800bit to the hosts, more than the device's 1mbit: "
        "while all are busy each gets a share, not its rate (--bandwidth 3mbit carries them)")


def test_dry_run_shows_the_warning():
    out, err = io.StringIO(), io.StringIO()
    rc = main(["-h", "198.18.1.2", "-p", "10000-10999", "--rate", "1mbit", "--mode", "shape", "--dry-run"],
              Console(out, err))
    assert rc == 0
    lines = out.getvalue().splitlines()
    assert lines[2] == ("# warning: --bandwidth: the 1,000 links' rates add up to 1gbit to the hosts, more than "
                        "the device's 100mbit: while all are busy each gets a share, not its rate "
                        "(--bandwidth 1gbit carries them)")


@pytest.mark.netns  # resolve_link probes the kernel, in a namespace of its own
def test_the_lab_carries_its_links_unless_told_otherwise():
    spec = LinkSpec(rate="1mbit", per="port")
    req, _ = resolve_link(spec, interface="eth0", netns=None, clients=CLIENTS, ports="10000-10099")
    # 2 clients x (v4 + v6) x 100 ports at 1 Mbit/s each way
    assert req.bandwidth_bps == 400_000_000 and oversubscribed(req) is None
    small = LinkSpec(rate="1mbit", per="host")
    req, _ = resolve_link(small, interface="eth0", netns=None, clients=CLIENTS, ports="10000-10099")
    assert req.bandwidth_bps == 100_000_000  # v0.3's, while the links fit in it
    told = LinkSpec(rate="1mbit", per="port", bandwidth="200mbit")
    req, _ = resolve_link(told, interface="eth0", netns=None, clients=CLIENTS, ports="10000-10099")
    assert req.bandwidth_bps == 200_000_000 and oversubscribed(req).startswith("--bandwidth: the 400 links'")
