"""An outage on the host kernel (namespaces rltr-*): a TCP download through one shaped link
whose capacity goes to nothing for 3 s and comes back, held by the method a trace driver
will use (docs/traces-notes.md): a token bucket as the link's leaf, shut and opened again.

What a tunnel does, and so must the link: nothing passes while it lasts (at most the one
frame the token bucket lets out as it shuts), the link's queue fills and then drops at its
limit, the connection is not reset, and the link sends again as soon as it opens, and the download resumes at the link's rate."""

import pytest

from bench import tracefacts

pytestmark = pytest.mark.netns


@pytest.fixture
def clean():
    tracefacts.cleanup()
    yield
    tracefacts.cleanup()


@pytest.mark.alone  # the sampler's 0.1 s against the clock
def test_a_shut_token_bucket_holds_the_link_like_a_tunnel(clean):
    r = tracefacts.outage("tbf-gate-kick", lead_s=3.0, outage_s=3.0, tail_s=4.0)
    assert r["client_error"] is None and r["server_stderr"] == ""  # not reset
    assert r["class_sent_in_outage_packets"] <= 1  # the frame let out as it shut
    assert r["received_in_outage_after_50ms_bytes"] == 0  # and after that, nothing
    assert r["leaf_drops_in_outage"] > 0 and r["leaf_backlog_at_resume_bytes"] > tracefacts.QUEUE_BYTES - 1514
    # the link sends again at once, kicked: its queue was full, a frame every 6 ms at its rate
    # (read every 0.1 s; without the kick it waited 0.64 s to 1.01 s in our runs, for the
    # sender's next packet or HTB's timer).  The reader's next bytes wait for TCP to fill the hole the outage left (1.0 s
    # once on a busy machine), so the download is held to resuming and then running at the rate
    assert r["class_first_sent_after_resume_s"] is not None and r["class_first_sent_after_resume_s"] < 0.15
    assert r["first_bytes_after_resume_s"] is not None
    assert r["class_bps_2s_to_end"] / tracefacts.RATE_BPS == pytest.approx(1.0, abs=0.1)
