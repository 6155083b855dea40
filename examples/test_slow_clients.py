"""Does a web server stay usable when its users sit behind 28.8k modems?

An example of ratelimit's pytest fixtures (docs/fixtures.md).  The server under
test -- here Python's own http.server -- runs in the lab's server namespace;
two clients, each behind an emulated V.34 modem of its own, fetch a
10,000-byte page at the same time, as two real modem users would.

Run as root (the fixtures make network namespaces):

    python3 -m pytest examples/test_slow_clients.py          # ratelimit installed
    python3 -m pytest -p ratelimit.lab.pytest_plugin examples/test_slow_clients.py   # from a checkout
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

PAGE_BYTES = 10_000
MODEM_BPS = 28_800  # the modem-28k8 profile's rate, each way
PORT = 8000


@pytest.fixture
def site(tmp_path):
    """The content the server under test serves."""
    (tmp_path / "page.html").write_bytes(b"<p>" + b"x" * (PAGE_BYTES - 8) + b"</p>\n")
    return tmp_path


# no_delay="auto": on a kernel without netem, keep the modem's rate and leave
# its 50 ms delay out (with a warning) instead of failing.
@pytest.mark.emulated_link(profile="modem-28k8", clients=2, no_delay="auto")
def test_slow_clients(emulated_link, site):
    link = emulated_link
    link.run_server([sys.executable, "-m", "http.server", str(PORT), "--bind", link.server.address,
                     "--directory", str(site)], port=PORT)

    # Both users fetch the page at once, each over a modem of its own.
    with ThreadPoolExecutor(2) as pool:
        downloads = list(pool.map(lambda i: link.measure_download("/page.html", client=i, port=PORT), (1, 2)))

    theory = PAGE_BYTES * 8 / MODEM_BPS  # 2.78 s, the 2000 experiments' figure
    for d in downloads:
        assert d.http_code == 200 and d.bytes == PAGE_BYTES
        # No faster than a modem allows (the first packets pass in one burst) ...
        assert d.seconds > 0.5 * theory, d
        # ... and the server adds little on top: the page is there within twice the theory.
        assert d.seconds < 2 * theory + 1, d

    # With the modem's 50 ms each way, a TCP handshake takes at least 100 ms.
    if not link.delay_left_out:
        assert link.measure_rtt(port=PORT) >= 0.100

    # The router saw each client's connection as a link of its own.
    busy = {row["host"] for row in link.stats()["links"] if row["direction"] == "dest" and row["bytes"]}
    assert busy == {c.address for c in link.clients}
