"""The dashboard and containers, with a real Podman and a real headless Chromium:
``ratelimit web --container web`` shows the links ``ratelimit --container web --hosts
container:client`` put on web's host-side veth, and says what became of them:

- the client restarted with another address: a notice on the card (and from ``--list``)
  that the links select the old one, a stranger's or no one's;
- the server restarted: the card's error says its veth went, and its links with it;
  applied again and watched again, the new veth's card shows them;
- the dashboard never keeps the namespace named (no ``rl-ct-`` name in /run/netns between
  its reads), and after ``--clean`` nothing is left.

Names of its own (``c3-``), removed after the test, passed or failed.  In the
``containers`` group (tests/schedule.py); ``alone``, as the group's other tests.
"""

import fcntl
import json
import os
import re
import subprocess
import sys

import pytest

from ratelimit.kernel.proc import stop

from enginekit import ROOT, Engine, delay_args, qdiscs, ratelimit, run_dir, web_and_client
from test_webui_browser import CHROMIUM, CHROMIUM_ARGS, open_page, sync_playwright

pytestmark = [pytest.mark.netns, pytest.mark.alone_on_host,
              pytest.mark.skipif(sync_playwright is None or not os.path.exists(CHROMIUM),
                                 reason="needs Python Playwright and Debian's chromium (/usr/bin/chromium)")]

P = "c3-"
TOKEN = "containers-dashboard-token-0123"


def router(e, *names):
    """``qdiscs`` with the veths' names left out, and the names in /run/netns but rootful
    Podman's own (a restart gives a container a new veth and namespace)."""
    return [sorted(re.sub(r"veth[0-9a-z]+", "veth", line) for line in text.splitlines())
            for text in qdiscs(e, *names)], [n for n in run_dir() if not n.startswith("netns-")]  # Podman's own


def names_between_reads(state_dir):
    """The ``rl-ct-`` names in /run/netns while no read is under way: the dashboard names
    the namespace within the containers' turn (``attach.turn``, a lock file in the
    state directory), so the test takes that turn to look."""
    with open(state_dir / "containers.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return [n for n in run_dir() if n.startswith("rl-ct-")]


def card_text(page, name, timeout=20000, has=None):
    """The text of the card ``name`` once it contains ``has``."""
    sel = f"#overview .card[data-name='{name}']"
    if has is not None:
        try:
            page.wait_for_function("([sel, has]) => (document.querySelector(sel)?.textContent || '').includes(has)",
                                   arg=[sel, has], timeout=timeout)
        except Exception:
            raise AssertionError(f"{name}: no {has!r} in {page.text_content('#overview')!r}") from None
    return page.text_content(sel)


def test_the_dashboard_shows_a_containers_links_and_what_became_of_them(engines_up, tmp_path):
    e = Engine("podman", engines_up)
    e.net, e.subnet, e.bridge = f"{P}net", "198.18.250.0/24", f"{P}p0"
    e.network()
    env = {**os.environ, "RATELIMIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT),
           "RATELIMIT_WEB_TOKEN": TOKEN}
    web, client = f"{P}web", f"{P}client"
    apply = ["--container", web, "--hosts", f"container:{client}", "--profile", "modem-28k8", *delay_args()]
    dashboard = None

    def watch():
        """A dashboard watching web: the process and its first line's (own interface, veth, URL)."""
        log = open(tmp_path / "dashboard.log", "a")
        proc = subprocess.Popen([sys.executable, "-m", "webui", "--container", web, "--engine", "podman",
                                 "--listen", "127.0.0.1:0", "--interval", "0.5"], stdout=subprocess.PIPE,
                                stderr=log, text=True, env=env, cwd=str(ROOT))
        line = proc.stdout.readline()
        m = re.search(r"watching (\S+), (\S+); serving (http://127\.0\.0\.1:\d+/)", line)
        assert m, line + (tmp_path / "dashboard.log").read_text()
        assert m.group(1) == f"{ns}/eth0" and m.group(2).startswith("veth"), line
        return proc, m.group(2), m.group(3)
    try:
        web_and_client(e, prefix=P)
        before = router(e, web, client)
        r = ratelimit(*apply, env=env)
        assert r.returncode == 0, r.stderr
        was = e.address(client)
        ns = "rl-ct-" + json.loads(e("inspect", web).stdout)[0]["Id"][:12]
        dashboard, veth, url = watch()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page, errors = open_page(browser, url + "#token=" + TOKEN)
                text = card_text(page, veth, has=was)
                assert f"podman container {web} (" in text and "the server, on its host-side veth" in text, text
                assert "modem-28k8" in text and "now has" not in text, text
                assert "nothing applied" in card_text(page, f"{ns}/eth0")  # where links were in 0.4 and earlier
                assert names_between_reads(tmp_path / "state") == []  # named only for each read

                # the client comes back with another address: its links select the old one
                e("restart", "-t", "0", client)
                now = e.address(client)
                assert now != was, (now, was)
                notice = (f"container '{client}' now has {now} (was {was}): its links select {was}, a stranger's "
                          f"or no one's; apply again (or ratelimit restore) to follow it")
                text = card_text(page, veth, has=notice)
                assert "modem-28k8" in text, text
                r = ratelimit("--container", web, "--list", env=env)
                assert r.returncode == 0 and r.stderr == f"ratelimit: {notice}\n", r.stderr

                # the server restarts: its links went with its veth
                e("restart", "-t", "0", web)
                gone = (f"podman container '{web}': its veth {veth} is gone (the container was restarted or stopped), "
                        f"and the links recorded on it with it; watch it again (restart the dashboard) to see its "
                        f"new veth")
                card_text(page, veth, has=gone)
                assert errors == [], errors
            finally:
                browser.close()
        stop(dashboard, 10)
        assert dashboard.returncode == 0, (tmp_path / "dashboard.log").read_text()
        r = ratelimit(*apply, env=env)  # applied again: both names resolved again
        assert r.returncode == 0, r.stderr
        ns = "rl-ct-" + json.loads(e("inspect", web).stdout)[0]["Id"][:12]
        dashboard, veth_now, url = watch()  # watched again: its new veth
        assert veth_now != veth
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page, errors = open_page(browser, url + "#token=" + TOKEN)
                text = card_text(page, veth_now, has=now)
                assert "modem-28k8" in text and "went with" not in text and "now has" not in text, text
                assert errors == [], errors
            finally:
                browser.close()
        stop(dashboard, 10)
        assert dashboard.returncode == 0, (tmp_path / "dashboard.log").read_text()
        r = ratelimit("--container", web, "--clean", env=env)
        assert r.returncode == 0, r.stderr
        assert router(e, web, client) == before
    finally:
        if dashboard is not None:
            stop(dashboard, 10)
        for name in (web, client):
            e.rm(name)
        e.remove()
