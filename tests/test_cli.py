"""The command line without root: options, aliases, dry runs and error lines."""

import io
import json

import pytest

from ratelimit.cli.main import build_parser, Console, main


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
        ("eth0", "100mbit", None, "both", "1514", "1200", None)
    assert args.verbose is False and args.mode is None and args.per is None  # port, or host with --mix (cli.main)
    # the bare command line polices, as v0.3 did, with its --burst 5: rate x 5 / 8 bytes
    from ratelimit.service import make_request
    req = make_request(args.interface, hosts="198.18.0.2", ports="1024")
    assert req.mode == "police"
    assert req.only.burst.text() == "5" and req.burst_bytes(req.only.down, 28800) == 28800 * 5 // 8
    # a profile describes a link that queues: shape unless police is asked for
    assert make_request(args.interface, hosts="198.18.0.2", ports="1024", profile="modem-28k8").mode == "shape"
    assert make_request(args.interface, hosts="198.18.0.2", ports="1024", profile="modem-28k8",
                        mode="police").mode == "police"


def test_mpu_is_ethernets_smallest_frame_on_ethernet_only():
    from ratelimit.plan.compile import compile_plan
    from ratelimit.errors import RatelimitError
    from ratelimit.plan.shaping import HtbClass
    from ratelimit.plan.filters import Police
    from ratelimit.service import make_request

    def charged_min(**kw):
        plan = compile_plan(make_request("eth0", hosts="198.18.0.2", ports="1024", **kw))
        return {op.mpu_bytes for op in plan.ops if type(op) in (HtbClass, Police)}

    assert charged_min() == {64}  # v0.3's command line: Ethernet, 64 bytes
    assert charged_min(mode="shape", rate="1mbit") == {64}
    # a modem's size table already makes a compressed ACK its 20-byte frame: nothing on top
    assert charged_min(profile="modem-28k8") == {0}
    assert charged_min(profile="modem-28k8", mode="police") == {0}
    assert charged_min(profile="dsl") == {0}
    assert charged_min(profile="modem-28k8", mpu="64") == {64}  # asked for, kept
    assert charged_min(profile="cable") == {64}
    with pytest.raises(RatelimitError, match="--mpu"):
        make_request("eth0", hosts="198.18.0.2", ports="1024", mpu="70000")


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
    (["profiles", "--bad"], "ratelimit: --bad: not an option (see ratelimit profiles --help)\n", 2),
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


# ---------------------------------------------------------------- v0.3's Getopt::Long spellings

V03_LINES = [
    # the original's documented invocation, as typed in 2000 (one dash, values as the next word)
    ("-interface eth0 -hosts client -ports 1024-2047 -rate 28800",
     "--interface eth0 --hosts client --ports 1024-2047 --rate 28800"),
    ("-if eth1 -bandwidth 10Mbit -h client -p 1024-2048,3000,5000-6000 -r 14400 -b 3 -d dest",
     "--interface eth1 --bandwidth 10Mbit --hosts client --ports 1024-2048,3000,5000-6000 --rate 14400 --burst 3 "
     "--direction dest"),
    ("-if eth0 -bw 100Mbit -hosts client -ports 80 -burst 5 -direction source -mtu 1500 -avpkt 1000 -mpu 0",
     "--interface eth0 --bandwidth 100Mbit --hosts client --ports 80 --burst 5 --direction source --mtu 1500 "
     "--avpkt 1000 --mpu 0"),
    ("-interface=eth2 -rate=28800 --hosts=client --ports=1024-2047 -burst=-5", "--interface eth2 --rate 28800 "
     "--hosts client --ports 1024-2047 --burst -5"),
    ("-clean -interface eth0", "--clean --interface eth0"),
    ("-list -if eth0", "--list --interface eth0"),
    ("-stat", "--stats"), ("-statistics", "--stats"), ("-stats", "--stats"),
    ("-verbose -h client -p 80", "--verbose --hosts client --ports 80"),
    ("-v -noverbose", "--no-verbose"),
    ("-Interface eth0 -RATE 9600 -int eth3", "--interface eth3 --rate 9600"),  # any case; a unique prefix
    ("-help", "--help"),
]


@pytest.mark.parametrize("old,new", V03_LINES, ids=[old for old, _ in V03_LINES])
def test_v03_single_dash_long_options_read_as_getopt_long_did(old, new):
    from ratelimit.cli.longopts import long_options
    parser = build_parser()
    assert vars(parser.parse_args(long_options(old.split(), parser))) == vars(parser.parse_args(new.split()))


def test_v03_short_options_stay_short():
    from ratelimit.cli.longopts import long_options
    parser = build_parser()
    args = parser.parse_args(long_options("-h client -p 80 -r 9600 -b 2 -d source -v".split(), parser))
    assert (args.hosts, args.ports, args.rate, args.burst, args.direction, args.verbose) == \
        ("client", "80", "9600", "2", "source", True)
    assert args.help is False  # -h is --hosts, as in v0.3
    args = parser.parse_args(long_options(["-p1024-2047", "-hclient", "-r", "-5"], parser))
    assert (args.ports, args.hosts, args.rate) == ("1024-2047", "client", "-5")


def test_v03_command_line_plans_as_the_two_dash_one():
    single = run("-interface", "eth0", "-hosts", "198.18.1.2", "-ports", "1024-1030", "-rate", "28800",
                 "-burst", "5", "-direction", "dest", "-mtu", "1514", "--dry-run")
    double = run("--interface", "eth0", "--hosts", "198.18.1.2", "--ports", "1024-1030", "--rate=28800",
                 "--burst=5", "--direction=dest", "--mtu=1514", "--dry-run")
    assert single[0] == 0 and single == double
    assert "action police rate 28800bit burst 18000" in single[1]


def test_unknown_single_dash_option_is_still_refused():
    rc, _, err = run("-interfaces", "eth0")
    assert rc == 2 and err.count("\n") == 1 and "-interfaces" in err


# ---------------------------------------------------------------- names that reach the shell

@pytest.mark.parametrize("argv,message", [
    (["--netns", "x$(touch /tmp/PWNED)"], "--netns: 'x$(touch /tmp/PWNED)' is not a namespace name (1-255 bytes; "
                                           "no '/', whitespace or control characters; not '.' or '..')"),
    (["--netns", "a\nb"], "--netns: 'a\\nb' is not a namespace name"),
    (["--netns", ".."], "--netns: '..' is not a namespace name"),
    (["--if", "eth0;reboot now"], "--interface: 'eth0;reboot now' is not an interface name (1-15 bytes; no '/', ':' "
                                   "or whitespace; not '.' or '..')"),
    (["--if", "a/b"], "--interface: 'a/b' is not an interface name"),
    (["--if", "eth0:1"], "--interface: 'eth0:1' is not an interface name"),
    (["--if", "sixteen-bytes-xx"], "--interface: 'sixteen-bytes-xx' is not an interface name"),
    (["--if", "ééééééééé"], "--interface: 'ééééééééé' is not an interface name"),  # 9 characters, 18 bytes
    (["--if", "."], "--interface: '.' is not an interface name"),
    (["--if", ""], "--interface: '' is not an interface name"),
])
@pytest.mark.parametrize("action", [[], ["clean"], ["list"], ["stats"]], ids=["apply", "clean", "list", "stats"])
def test_bad_names_are_refused_before_anything(argv, message, action):
    rc, out, err = run("-h", "198.18.1.2", "-p", "80", *argv, *action, "--dry-run")
    assert rc == 2 and out == ""
    assert err == f"ratelimit: {message}" + err[len(f"ratelimit: {message}"):] and err.count("\n") == 1


def test_dry_run_quotes_every_name():
    rc, out, err = run("--if", "x;touch${IFS}P", "--netns", "n$(id)`id`", "-h", "198.18.1.2", "-p", "80",
                       "--mode", "shape", "--dry-run")
    assert rc == 0, err
    assert "ip -n 'n$(id)`id`' link add name 'rl-x;to54560d0c' type ifb" in out
    assert "tc -n 'n$(id)`id`' -batch - <<'EOF'" in out
    assert "qdisc add dev 'x;touch${IFS}P' root handle 52: htb" in out
    assert "action mirred egress redirect dev 'rl-x;to54560d0c'" in out
    rc, out, err = run("--if", "it's", "-h", "198.18.1.2", "-p", "80", "--mode", "shape", "--dry-run")
    assert rc == 0 and "qdisc add dev \"it's\" root handle 52:" in out and "ip link add name 'rl-it'\"'\"'s'" in out


def test_a_name_tc_batch_cannot_carry_is_refused_in_a_dry_run():
    rc, out, err = run("--if", "a#b", "-h", "198.18.1.2", "-p", "80", "--dry-run")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("ratelimit: --interface: 'a#b' cannot be written into a tc -batch script")


def test_batch_words_read_back_as_tc_reads_them():
    """tc's reader (iproute2 makeargs): words split on whitespace, a word in ' or " taken whole."""
    from ratelimit.spec.names import batch_word

    def makeargs(line):
        words, i = [], 0
        while i < len(line):
            if line[i] in " \t":
                i += 1
                continue
            if line[i] in "'\"":
                end = line.index(line[i], i + 1)
                words.append(line[i + 1:end])
                i = end + 1
            else:
                end = min([j for j in (line.find(" ", i), line.find("\t", i)) if j >= 0] or [len(line)])
                words.append(line[i:end])
                i = end
        return words
    for name in ("eth0", "a;b", "$(id)", "`id`", "x'y", 'q"r', "b\\c", "x|y&z", "a>b<c", "{a,b}", "*"):
        assert makeargs(f"qdisc add dev {batch_word(name)} root") == ["qdisc", "add", "dev", name, "root"]


SUBCOMMAND_HELP = [["profiles"], ["save"], ["restore"], ["vm"], ["web"], ["lab"], ["lab", "up"], ["lab", "status"],
                   ["lab", "exec"], ["lab", "apply"], ["lab", "clean"], ["lab", "down"], ["lab", "demo"]]


@pytest.mark.parametrize("words", SUBCOMMAND_HELP, ids=" ".join)
def test_every_subcommand_answers_help_with_its_usage_and_options(words, capsys):
    code, out, err = run(*words, "--help")
    printed = out + capsys.readouterr().out  # argparse's own --help (lab, vm) prints to sys.stdout
    assert code == 0 and err == "", err
    assert printed.startswith(f"usage: ratelimit {' '.join(words)}"), printed
    assert "options:" in printed or words == ["lab", "exec"], printed


def test_help_is_for_the_main_command_line_and_h_stays_hosts():
    code, out, _ = run("--help")
    assert code == 0 and "--hosts HOSTS, -h HOSTS" in out
    assert build_parser().parse_args(["-h", "198.18.0.2"]).hosts == "198.18.0.2"
