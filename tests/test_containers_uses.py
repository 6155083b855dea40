"""Containers as a user's suite uses them, with real engines (tests/enginekit.py):

- the pytest fixture (``container_link``, ``make_container_link``) in a pytest run of its
  own: a web container as the server of a client container over a modem, and the client as
  one user, each download within 3% of the link model; the links gone after a failing test;
  a refusal in one line.

Names of their own (``rlct2-``), removed after each test, passed or failed.  The module
is in the ``containers`` group with tests/test_containers_engines.py: one dockerd.
"""

import re
import textwrap

import pytest

from enginekit import qdiscs, run_dir, web_and_client
from test_pytest_plugin import run_pytest

pytestmark = [pytest.mark.netns, pytest.mark.alone]

P = "rlct2-"


def leftovers(e, state):
    """What a run could leave: every qdisc on the host and in the two containers, the named
    namespaces, and records in the state directory."""
    records = sorted(str(p.relative_to(state)) for p in state.rglob("*.json")) if state.exists() else []
    return qdiscs(e, f"{P}web", f"{P}client"), run_dir(), records


def test_the_fixture_puts_a_container_behind_a_modem(engine, tmp_path):
    e = engine
    web_and_client(e, prefix=P)
    state = tmp_path / "state"  # run_pytest's
    before = leftovers(e, state)
    (tmp_path / "test_user.py").write_text(textwrap.dedent(f"""
        import pytest

        ENGINE = {e.name!r}

        @pytest.mark.container_link("{P}web", hosts="container:{P}client", profile="modem-28k8", no_delay="auto",
                                    engine=ENGINE)
        def test_server(container_link):
            link = container_link
            assert (link.use, link.interface, link.engine) == ("server", "eth0", ENGINE)
            d = link.fetch("/10000.bin")  # from the one client named, to web's address
            assert (d.http_code, d.bytes, d.client) == (200, 10_000, "{P}client")
            model = d.model_seconds(link.model)
            print(f"RESULT server {{d.seconds:.3f}} {{model:.3f}}")
            assert 0.97 < d.seconds / model < 1.03, (d.seconds, model)
            assert sum(r["bytes"] for r in link.stats()["links"] if r["direction"] == "dest") > 10_000

        @pytest.mark.container_link("{P}client", profile="modem-28k8", no_delay="auto", engine=ENGINE)
        def test_user(container_link):
            link = container_link
            assert link.use == "user" and link.interface != "eth0"
            d = link.fetch(link.url("/10000.bin", server="{P}web"))
            model = d.model_seconds(link.model)
            print(f"RESULT user {{d.seconds:.3f}} {{model:.3f}}")
            assert 0.97 < d.seconds / model < 1.03, (d.seconds, model)

        def test_fails_with_links_on(make_container_link):
            make_container_link("{P}web", hosts="container:{P}client", rate="1mbit", mode="shape", engine=ENGINE)
            make_container_link("{P}client", rate="2mbit", mode="shape", engine=ENGINE)
            assert False, "the user's test fails"

        @pytest.mark.container_link("{P}missing", profile="3g", engine=ENGINE)
        def test_missing(container_link):
            pass

        @pytest.mark.container_link("{P}web", hosts="container:{P}client", profile="modem-28k8", colour="red")
        def test_unknown_option(container_link):
            pass
    """))
    r = run_pytest(tmp_path, "test_user.py", "-s")
    out = r.stdout
    print(out)
    assert "PASSED test_user.py::test_server" in out and "PASSED test_user.py::test_user" in out, out + r.stderr
    assert "AssertionError: the user's test fails" in out
    assert f"container_link: --container: no container '{P}missing' in {e.name}" in out
    assert "container_link: 'colour' is not an option (hosts, scenario, profile, " in out
    assert "1 failed, 2 passed" in out and "2 errors in" in out
    results = {use: (float(s), float(m)) for use, s, m in re.findall(r"RESULT (\w+) ([\d.]+) ([\d.]+)", out)}
    assert set(results) == {"server", "user"}
    for use, (seconds, model) in results.items():
        print(f"{e.name}, the fixture, {use}: {seconds:.3f} s, the model {model:.3f} s ({seconds / model:.3f})")
    assert leftovers(e, state) == before
