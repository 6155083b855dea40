"""The Vagrant lab booted for real (vagrant-libvirt): box, VMs, demo, monitoring, teardown.

Marked ``vagrant``; part of the README's test command (``python -m pytest -ra
tests``), deselect with ``-m "not vagrant"``.  One test, in stages, each
printed as it starts and ends (boots take minutes under software emulation):

  tools     root, vagrant with vagrant-libvirt, virsh, ssh
  libvirt   ``sh vagrant/libvirt.sh start``: libvirtd up (started here where no init
            system does it), KVM probed; nothing of a lab named ``rl-*`` exists yet
            (what a killed earlier run of this test left is removed first)
  box       ``bash vagrant/box/build.sh``: the box, from its cache when it is current
  up        ``vagrant up``: 1 router, 1 client, 1 server (the documented default)
  demo      ``vagrant/demo.py fetch --runs 3``: the 10,000-byte download through the
            router's modem link; the median of measured / model within 5%
  grow      RL_ROUTERS=2 RL_CLIENTS=2: router2 and client2 join, the server is
            provisioned again (routes, Prometheus targets)
  targets   Prometheus has both routers as targets with up == 1 (from the lab's inventory)
  dialup    ``vagrant/demo.py dialup``: x = 100 httperf sessions over both routers for 40 s; the
            PromQL per-router rate is above zero for each router during the run
  fleet     ``ansible-playbook`` of the ratelimit.fleet collection's apply.yml, with the
            inventory ``vagrant/demo.py inventory`` makes of the lab's (the one Prometheus'
            targets come from) and ``vagrant ssh-config``: both routers stage and commit a
            scenario, a second run changes nothing, and each client's download takes its new
            link's model time (``demo.py fetch``, within 5%)
  expire    ``vagrant/expirecheck.py`` on router1: a plan applied --for 45 s, then kill -9 of
            every ratelimit process; systemd starts the plan's watcher again before the end,
            and the plan is gone within 1 s of it
  destroy   ``vagrant destroy -f``; then no domain, network or volume of the lab is
            left in libvirt (the box stays in Vagrant's box directory and the build cache)

A stage that cannot run fails the test with the stage and the reason (the
command's last lines, the VMs' serial consoles); it never skips.  Whatever
happens, the lab is destroyed at the end, what is left of it is removed by its
``rl-*`` names, the box's upload into libvirt's pool is deleted if this test
made it, and libvirtd is stopped if this test started it.  The whole run is
bounded by ``RATELIMIT_VAGRANT_TIMEOUT`` seconds (default 2400).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time

import pytest

from bench.fleetlab import COLLECTIONS, PLAYBOOK
from vagrantlab import (CLAIM, RUN_DIR, TOLERANCE, VAGRANT_DIR, Run, StageFailed, cleanup, lab_objects,
                        last_lines, libvirt_objects, one_packet_per_frame, remove_lab_objects, serial_tails)

pytestmark = pytest.mark.vagrant

EXPIRE_FOR_S = 45  # the expire stage's --for

# the fleet stage's scenario: the lab's two clients (the Vagrantfile's client_addr), each
# behind its own router, on 56k modems (a link layer the lab's 28.8k plan shares: staged beside it)
FLEET_SCENARIO = """
[cohort.modems]
description = "client1 behind router1 and client2 behind router2, each its own 56k modem"
hosts = ["198.18.1.11", "198.18.2.12"]
profile = "modem-56k"
"""


def test_vagrant_lab_boots_demo_and_monitoring(tmp_path, capsys):
    run = Run(capsys, tmp_path)
    before = None
    started_libvirt = False
    failure = None
    up_env = run.env(RL_ROUTERS="1", RL_CLIENTS="1")
    grown_env = run.env(RL_ROUTERS="2", RL_CLIENTS="2")
    try:
        # ---------------------------------------------------------- tools
        t = run.begin("tools", "root, vagrant, vagrant-libvirt, virsh, ssh")
        if os.geteuid() != 0:
            run.fail("needs root (libvirt's qemu:///system, mmdebstrap); run the suite as root")
        missing = [c for c in ("vagrant", "virsh", "ssh", "curl") if shutil.which(c) is None]
        if missing:
            run.fail(f"not installed: {', '.join(missing)} (bash .ci/install installs them)")
        _, plugins = run.run(["vagrant", "plugin", "list"], timeout=120)
        if "vagrant-libvirt" not in plugins:
            run.fail("vagrant-libvirt is not installed (apt-get install vagrant-libvirt)")
        run.end(t)

        # ---------------------------------------------------------- libvirt
        t = run.begin("libvirt", "sh vagrant/libvirt.sh start (libvirtd, KVM probe)")
        had_started_file = (RUN_DIR / "started").exists()
        _, out = run.run(["sh", VAGRANT_DIR / "libvirt.sh", "start"], timeout=300)
        started_libvirt = not had_started_file and (RUN_DIR / "started").exists()
        before = libvirt_objects()
        if CLAIM.exists():
            claimed = {k: set(v) for k, v in json.loads(CLAIM.read_text()).items()}
            removed = remove_lab_objects(claimed)
            CLAIM.unlink()
            run.say(f"removed the lab a killed earlier run of this test left: {', '.join(removed) or 'nothing'}")
            before = libvirt_objects()
        left = lab_objects(before)
        if left["domains"] or left["networks"]:
            before = None  # not ours: never remove them
            run.fail(f"a Vagrant lab is up already (domains: {', '.join(left['domains']) or 'none'}; "
                     f"networks: {', '.join(left['networks']) or 'none'}): destroy it first "
                     f"(cd vagrant && vagrant destroy -f, with its RL_* variables)")
        CLAIM.write_text(json.dumps({k: sorted(v) for k, v in before.items()}))
        run.end(t, last_lines(out, 1))

        # ---------------------------------------------------------- box
        t = run.begin("box", "bash vagrant/box/build.sh (cold: a few minutes; cached: seconds)")
        _, out = run.run(["bash", VAGRANT_DIR / "box" / "build.sh"], timeout=1800, log="build.log")
        run.end(t, last_lines(out, 1))

        # ---------------------------------------------------------- up
        t = run.begin("up", "vagrant up: router1, client1, server")
        code, out = run.run(["vagrant", "up", "--provider=libvirt"], env=up_env, timeout=1500,
                            check=False, log="up.log")
        if code != 0:
            run.fail(f"vagrant up failed (exit {code}):\n{last_lines(out, 25)}\n"
                     + serial_tails(["server", "router1", "client1"], run.stage_wall))
        one_packet_per_frame(run, out)
        run.end(t)

        # ---------------------------------------------------------- demo
        t = run.begin("demo", "vagrant/demo.py fetch --runs 3 (client1 -> router1 -> server)")
        _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "fetch", "--runs", "3", "--json"],
                         env=up_env, timeout=600)
        demo = json.loads(out.strip().splitlines()[-1])
        ratios = [r["ratio"] for r in demo["runs"]]
        link = demo["runs"][0]["link"]
        measured = ", ".join(f"{r['measured_s']:.2f}" for r in demo["runs"])
        lookups = ", ".join(f"{r['lookup_s'] * 1000:.0f}" for r in demo["runs"])
        note = (f"measured (connect to last byte) {measured} s vs model "
                f"{link['model_s']:.2f} s ({link['profile']}, {link['mode']}); ratios "
                f"{', '.join(f'{x:.3f}' for x in ratios)} (the name's lookup before each: "
                f"{lookups} ms)")
        run.end(t, note)
        median = statistics.median(ratios)
        if not abs(median - 1) <= TOLERANCE:
            run.fail(f"the median of measured / model is {median:.3f}, not within {TOLERANCE:.0%}: {note}")

        # ---------------------------------------------------------- grow
        t = run.begin("grow", "RL_ROUTERS=2 RL_CLIENTS=2: vagrant up router2 client2; provision the server")
        code, out = run.run(["vagrant", "up", "--provider=libvirt", "router2", "client2"], env=grown_env,
                            timeout=1500, check=False, log="up2.log")
        if code != 0:
            run.fail(f"vagrant up router2 client2 failed (exit {code}):\n{last_lines(out, 25)}\n"
                     + serial_tails(["router2", "client2"], run.stage_wall))
        one_packet_per_frame(run, out)
        run.run(["vagrant", "provision", "server", "--provision-with", "hosts,server,prometheus"],
                env=grown_env, timeout=600, log="provision-server.log")
        run.end(t)

        # ---------------------------------------------------------- targets
        t = run.begin("targets", "Prometheus scrapes router1 and router2 (up == 1)")
        until = time.monotonic() + 120
        while True:
            _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "targets", "--json"], env=grown_env,
                             timeout=180)
            targets = json.loads(out.strip().splitlines()[-1])
            up = targets["up"]
            health = {t_["router"]: t_["health"] for t_ in targets["targets"]}
            # the targets' current health (a restarted Prometheus still has earlier `up` samples)
            if health == {"router1": "up", "router2": "up"} and up.get("router1") == 1 and up.get("router2") == 1:
                break
            if time.monotonic() > until:
                run.fail(f"Prometheus targets are not both up after 120 s: {targets['targets']}")
            time.sleep(5)
        run.end(t, ", ".join(f"{t_['router']} {t_['instance']} {t_['health']}" for t_ in targets["targets"]))

        # ---------------------------------------------------------- dialup
        t = run.begin("dialup", "x = 100 httperf sessions over both routers for 40 s; PromQL per router")
        _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "dialup", "--sessions", "100",
                          "--seconds", "40", "--json"], env=grown_env, timeout=300)
        dial = json.loads(out.strip().splitlines()[-1])
        prom = dial["prometheus"]
        note = "; ".join(f"{r}: {prom['bps'].get(r, {}).get('down', 0) / 1000:.0f} kbit/s down, "
                         f"{prom['active_links'].get(r, 0):.0f} active links, "
                         f"scrape {prom['scrape'].get(r, 0):.2f} s" for r in ("router1", "router2"))
        run.end(t, note)
        assert set(dial["behind"].values()) == {"router1", "router2"}, dial["behind"]
        for r in ("router1", "router2"):
            if not prom["bps"].get(r, {}).get("down", 0) > 0:
                run.fail(f"PromQL gave no down rate for {r} during the dial-up run: {prom} "
                         f"(query {dial['queries']['bps']})")

        # ---------------------------------------------------------- fleet
        t = run.begin("fleet", "ansible-playbook apply.yml over router1 and router2 (demo.py inventory), twice")
        _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "inventory", "--json"], env=grown_env,
                         timeout=180)
        inventory = run.tmp / "inventory.json"
        inventory.write_text(out.strip().splitlines()[-1])
        scenario = run.tmp / "fleet.toml"
        scenario.write_text(FLEET_SCENARIO)
        report = run.tmp / "fleet-report.json"
        ansible = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_HOST_KEY_CHECKING="False",
                       ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(run.tmp / "ansible-local"))
        did = {}
        for attempt in ("apply", "again"):
            code, out = run.run(["ansible-playbook", "-i", inventory, PLAYBOOK, "-e", json.dumps(
                {"ratelimit_scenario": str(scenario), "ratelimit_report": str(report)})], env=ansible,
                timeout=900, check=False, log=f"fleet-{attempt}.log")
            if code != 0:
                run.fail(f"the fleet {attempt} failed (exit {code}):\n{last_lines(out, 25)}")
            did[attempt] = {r: (o["stage"]["how"], o["commit"]["how"] if o["commit"] else None)
                            for r, o in json.loads(report.read_text()).items()}
        want = {"apply": ("staged", "committed"), "again": ("unchanged", "nothing")}
        for attempt, routers in did.items():
            if routers != {r: want[attempt] for r in ("router1", "router2")}:
                run.fail(f"the fleet {attempt}: {routers}, not {want[attempt]} on each router")
        fetched = []
        for client in (1, 2):  # each client's download over its own router's link of the scenario
            _, out = run.run([sys.executable, VAGRANT_DIR / "demo.py", "fetch", "--client", str(client), "--runs",
                              "3", "--json"], env=grown_env, timeout=600)
            demo = json.loads(out.strip().splitlines()[-1])
            fetched.append(f"client{client} via {demo['router']}: {demo['runs'][0]['link']['profile']}, "
                           f"median measured / model {demo['median_ratio']:.3f}")
            if demo["runs"][0]["link"]["profile"] != "modem-56k" or not abs(demo["median_ratio"] - 1) <= TOLERANCE:
                run.fail(f"after the fleet apply, {fetched[-1]} (want modem-56k within {TOLERANCE:.0%})")
        run.end(t, f"{did}; " + "; ".join(fetched))

        # ---------------------------------------------------------- expire
        # 45 s, not 5: in this software-emulated VM a ratelimit process takes seconds to start
        # (12 s for a watcher started again beside the dashboard's restart), and an apply
        # returns once its watcher holds its lock
        t = run.begin("expire", f"on router1: modem-28k8 --for {EXPIRE_FOR_S}s, then kill -9 of every ratelimit "
                      "process")
        _, out = run.run(["vagrant", "ssh", "router1", "-c", "sudo /opt/ratelimit/bin/python "
                          f"/vagrant/vagrant/expirecheck.py --interface eth1 --host 198.18.1.11 --for {EXPIRE_FOR_S}"],
                         env=grown_env, timeout=300, log="expire.log")
        ex = json.loads(out.strip().splitlines()[-1])
        after_kill = ex["unit_after_kill"]
        run.end(t, f"killed {len(ex['killed'])} process(es) {ex['killed_before_end_s']:.1f} s before the end; "
                   f"{ex['unit']} {after_kill.get('ActiveState')} again after {ex['restarted_s']} s "
                   f"(NRestarts {after_kill.get('NRestarts')}), its watcher holding its lock after "
                   f"{ex['watching_s']} s; the plan gone {ex['lag_s']:.2f} s after the end")
        if not any("expire" in argv for argv in ex["killed"].values()):
            run.fail(f"no watcher (ratelimit expire) was running to kill: {ex['killed']}")
        if ex["restarted_s"] is None or ex["watching_s"] is None or ex["watching_s"] > ex["killed_before_end_s"]:
            run.fail(f"systemd did not start the killed watcher again before the plan's end: {ex}")
        if not (ex["removed"] and 0 <= ex["lag_s"] <= 1.0):
            run.fail(f"the plan was not gone within 1 s of its end: {ex}")

        # ---------------------------------------------------------- destroy
        t = run.begin("destroy", "vagrant destroy -f")
        run.run(["vagrant", "destroy", "-f"], env=grown_env, timeout=600, log="destroy.log")
        left = lab_objects(libvirt_objects())
        run.end(t)
        if any(left.values()):
            run.fail(f"vagrant destroy -f left {left}")
    except StageFailed as e:
        failure = str(e)
    finally:
        cleanup(run, before, grown_env, started_libvirt)
    if failure:
        pytest.fail(failure, pytrace=False)
    run.say("stages: " + ", ".join(f"{k} {v:.0f} s" for k, v in run.times.items())
            + f"; total {time.monotonic() - run.t0:.0f} s")
