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

    for d in downloads:
        assert d.http_code == 200 and d.bytes == PAGE_BYTES
        # What the modem takes for these bytes: PPP frames at its rate, handshake, request.
        modem = d.model_seconds(link.model)
        # No faster than a modem allows ...
        assert d.seconds > 0.95 * modem, d
        # ... and the server adds little on top.
        assert d.seconds < modem + 1, d

    # With the modem's 50 ms each way, a TCP handshake takes at least 100 ms.
    if not link.delay_left_out:
        assert link.measure_rtt(port=PORT) >= 0.100

    # The router saw each client as one link (one person behind one modem).
    busy = {row["host"] for row in link.stats()["links"] if row["direction"] == "dest" and row["bytes"]}
    assert busy == {c.address for c in link.clients}
