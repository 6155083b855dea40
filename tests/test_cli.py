"""The command line without root: options, aliases, dry runs and error lines."""

import io
import json

import pytest

from ratelimit.cli import Console, build_parser, main


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Console(out, err))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv,field,value", [
    (["--if", "eth3"], "interface", "eth3"),
    (["--interface", "eth3"], "interface", "eth3"),
    (["--bw", "10mbit"], "bandwidth", "10mbit"),
    (["-h", "client"], "hosts", "client"),
    (["-p", "1024-2047"], "ports", "1024-2047"),
    (["-r", "14400"], "rate", "14400"),
    (["-b", "3"], "burst", "3"),
    (["-d", "source"], "direction", "source"),
    (["--mtu", "1500"], "mtu", "1500"),
    (["--avpkt", "1000"], "avpkt", "1000"),
    (["--mpu", "0"], "mpu", "0"),
    (["--stat"], "stats", True), (["--statistics"], "stats", True), (["--stats"], "stats", True),
    (["-v"], "verbose", True), (["--verbose", "--noverbose"], "verbose", False), (["--no-verbose"], "verbose", False),
    (["clean"], "action", "clean"), (["list"], "action", "list"), (["stats"], "action", "stats"),
])
def test_v03_options_and_aliases(argv, field, value):
    args = build_parser().parse_args(argv)
    assert getattr(args, field) == value


def test_v03_defaults():
    args = build_parser().parse_args([])
    assert (args.interface, args.bandwidth, args.rate, args.direction, args.mtu, args.avpkt, args.mpu) == \
        ("eth0", "100mbit", None, "both", "1514", "1200", "64")
    assert args.verbose is False and args.mode is None and args.per == "port"
    # the bare command line polices, as v0.3 did, with its --burst 5: rate x 5 / 8 bytes
    from ratelimit.service import make_request
    req = make_request(args.interface, hosts="198.18.0.2", ports="1024")
    assert req.mode == "police"
    assert req.burst.text() == "5" and req.burst_bytes(req.down, 28800) == 28800 * 5 // 8
    # a profile describes a link that queues: shape unless police is asked for
    assert make_request(args.interface, hosts="198.18.0.2", ports="1024", profile="modem-28k8").mode == "shape"
    assert make_request(args.interface, hosts="198.18.0.2", ports="1024", profile="modem-28k8",
                        mode="police").mode == "police"


def test_help_is_long_option_and_lists_every_v03_option():
    code, out, _ = run("--help")
    assert code == 0
    for opt in ("--clean", "--list", "--stat", "--verbose", "--interface", "--if", "--bandwidth", "--bw", "--hosts",
                "-h", "--ports", "-p", "--rate", "-r", "--burst", "-b", "--direction", "-d", "--mtu", "--avpkt",
                "--mpu", "--profile", "--mode", "--delay", "--netns", "--dry-run", "--json", "--force", "--debug"):
        assert opt in out


def test_dry_run_prints_a_runnable_script_without_root_or_netlink():
    code, out, err = run("--if", "eth9", "-h", "198.18.1.2", "-p", "1024-1025", "--profile", "modem-28k8", "--mode", "police",
                         "--netns", "labr", "--dry-run")
    assert code == 0, err
    assert "ip -n labr link add name rl-eth9 type ifb" in out
    assert "tc -n labr -batch - <<'EOF'" in out
    assert "qdisc add dev eth9 root handle 52: stab overhead -46 linklayer ethernet htb default 0" in out
    assert "netem limit 1000 delay 50ms" in out
    assert out.count("action police rate 26864bit") == 4  # 2 ports x 2 directions, PPP frames at 28,800 x 0.9328


@pytest.mark.parametrize("argv,message,code", [
    (["-h", "198.18.1.2", "-p", "70000"], "ratelimit: --ports: 70000 is not a port (1-65535)\n", 2),
    (["-h", "198.18.1.2", "-p", "80", "--rate", "fast"], "ratelimit: --rate: 'fast' is not a rate", 2),
    (["-h", "nohost.invalid", "-p", "80"], "ratelimit: --hosts: 'nohost.invalid' is not an address and does not resolve to one\n", 3),
    (["-p", "80"], "ratelimit: --hosts: none given", 2),
    (["--bogus"], "ratelimit: --bogus: not an option (see ratelimit --help)\n", 2),
    (["--mode", "drop"], "ratelimit: argument --mode: invalid choice: 'drop'", 2),
    (["frobnicate"], "ratelimit: 'frobnicate' is not an action", 2),
    (["-h", "198.18.1.2", "-p", "80", "--profile", "nope"], "ratelimit: --profile: 'nope' is not a profile", 2),
    (["profiles", "--bad"], "ratelimit: profiles: '--bad' is not an option (only --json)\n", 2),
])
def test_bad_input_is_one_line_with_an_exit_code(argv, message, code):
    rc, out, err = run(*argv)
    assert rc == code
    assert err.startswith(message)
    assert err.count("\n") == 1 and "Traceback" not in err


def test_debug_shows_the_traceback():
    rc, _, err = run("-h", "198.18.1.2", "-p", "0", "--debug")
    assert rc == 2 and "Traceback" in err and err.rstrip().endswith("ratelimit: --ports: 0 is not a port (1-65535)")


def test_profiles_lists_every_shipped_profile_with_numbers():
    rc, out, _ = run("profiles")
    assert rc == 0
    for name in ("modem-14k4", "modem-28k8", "modem-33k6", "modem-56k", "isdn-64k", "isdn-128k", "dsl", "cable",
                 "gprs", "edge", "3g", "4g", "lte", "satellite-geo", "lan-0ms", "regional-50ms", "national-100ms",
                 "international-200ms", "intercontinental-400ms"):
        assert f"\n{name} " in out
    assert "28800bit 50ms" in out
    rc, out, _ = run("profiles", "--json")
    data = {p["name"]: p for p in json.loads(out)}
    assert data["intercontinental-400ms"]["down"]["delay_us"] + data["intercontinental-400ms"]["up"]["delay_us"] == 400_000


def test_user_profile_directory_overrides_and_adds(tmp_path, monkeypatch):
    (tmp_path / "my-link.toml").write_text('description = "mine"\n[down]\nrate = "64kbit"\n[up]\nrate = "16kbit"\n')
    (tmp_path / "modem-28k8.toml").write_text('description = "slower modem"\n[down]\nrate = "20kbit"\n')
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", str(tmp_path))
    rc, out, _ = run("profiles")
    assert "my-link " in out and "64kbit" in out
    rc, out, _ = run("-h", "198.18.1.2", "-p", "80", "--profile", "modem-28k8", "--dry-run", "-d", "dest")
    assert "htb rate 20kbit" in out


def test_explicit_flags_override_the_profile():
    rc, out, _ = run("-h", "198.18.1.2", "-p", "80", "--profile", "modem-28k8", "--rate", "14.4kbit",
                     "--delay", "300ms", "-d", "dest", "--dry-run")
    # the modem's line rate, less what V.42 and PPP framing take of it (link layer ppp-vj)
    assert rc == 0 and "htb rate 13432bit" in out and "delay 300ms" in out
