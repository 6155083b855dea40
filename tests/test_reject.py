"""A reject, pure: its nftables rules (golden text), how the command line, a scenario and
the record say it, and its refusals in one line."""

import json

import pytest

from ratelimit import service
from ratelimit.errors import UsageError
from ratelimit.plan import reject
from ratelimit.plan.compile import compile_plan
from ratelimit.profiles import scenario
from ratelimit.spec.summary import describe, summary
from ratelimit.state import records

GOLDEN = """\
table inet ratelimit_r0
delete table inet ratelimit_r0
table inet ratelimit_r0 {
\tcounter c0_down {
\t}
\tcounter c0_up {
\t}
\tchain input {
\t\ttype filter hook input priority -10; policy accept;
\t\tiifname "r0" ip saddr { 198.18.1.2, 198.18.1.3 } ip daddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th sport 1024-2047 th dport { 80, 8000-8099 } meta l4proto tcp counter name c0_up reject with tcp reset
\t\tiifname "r0" ip saddr { 198.18.1.2, 198.18.1.3 } ip daddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th sport 1024-2047 th dport { 80, 8000-8099 } counter name c0_up reject with icmpx type port-unreachable
\t}
\tchain forward {
\t\ttype filter hook forward priority -10; policy accept;
\t\toifname "r0" ip daddr { 198.18.1.2, 198.18.1.3 } ip saddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th dport 1024-2047 th sport { 80, 8000-8099 } meta l4proto tcp counter name c0_down reject with tcp reset
\t\toifname "r0" ip daddr { 198.18.1.2, 198.18.1.3 } ip saddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th dport 1024-2047 th sport { 80, 8000-8099 } counter name c0_down reject with icmpx type port-unreachable
\t\tiifname "r0" ip saddr { 198.18.1.2, 198.18.1.3 } ip daddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th sport 1024-2047 th dport { 80, 8000-8099 } meta l4proto tcp counter name c0_up reject with tcp reset
\t\tiifname "r0" ip saddr { 198.18.1.2, 198.18.1.3 } ip daddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th sport 1024-2047 th dport { 80, 8000-8099 } counter name c0_up reject with icmpx type port-unreachable
\t}
\tchain output {
\t\ttype filter hook output priority -10; policy accept;
\t\toifname "r0" tcp flags & rst == rst accept
\t\toifname "r0" icmp type destination-unreachable accept
\t\toifname "r0" icmpv6 type destination-unreachable accept
\t\toifname "r0" ip daddr { 198.18.1.2, 198.18.1.3 } ip saddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th dport 1024-2047 th sport { 80, 8000-8099 } meta l4proto tcp counter name c0_down reject with tcp reset
\t\toifname "r0" ip daddr { 198.18.1.2, 198.18.1.3 } ip saddr 198.18.0.0/24 meta l4proto { tcp, udp } \
th dport 1024-2047 th sport { 80, 8000-8099 } counter name c0_down reject with icmpx type port-unreachable
\t}
}
"""
TWO = """
[cohort.phone]
description = "refused"
hosts = "198.18.1.2,2001:db8::2"
rate = "2mbit"
reject = {refused}
[cohort.other]
description = "never touched"
hosts = "198.18.1.3"
rate = "2mbit"
"""
DEFAULT = """
[default]
description = "every other flow"
rate = "1mbit"
reject = true
"""


def test_the_rules_of_a_cohort_with_ports_and_servers():
    req = service.make_request("r0", hosts="198.18.1.2,198.18.1.3", ports="1024-2047", rate="1mbit",
                               servers="198.18.0.0/24", server_ports="80,8000-8099", reject=True)
    assert reject.ruleset(req) == GOLDEN


def test_one_direction_rules_only_its_hooks_and_each_family_its_own_match():
    req = service.make_request("r0", scenario=scenario.parse(TWO.format(refused="true")), direction="source")
    rules = reject.ruleset(req)
    assert "chain output" not in rules and "c0_down" not in rules and "198.18.1.3" not in rules
    assert 'iifname "r0" ip6 saddr 2001:db8::2 meta l4proto tcp counter name c0_up reject with tcp reset' in rules
    assert 'iifname "r0" ip saddr 198.18.1.2 counter name c0_up reject with icmpx type port-unreachable' in rules


def test_no_reject_no_rules_and_the_links_are_the_same_either_way():
    """The rules stand beside the links: a rejecting cohort's plan is the same tc plan."""
    plain = service.make_request("r0", scenario=scenario.parse(TWO.format(refused="false")))
    refused = service.make_request("r0", scenario=scenario.parse(TWO.format(refused="true")))
    assert reject.ruleset(plain) is None
    assert compile_plan(plain).ops == compile_plan(refused).ops


def test_a_reject_is_in_the_summary_and_the_record():
    req = service.make_request("r0", scenario=scenario.parse(TWO.format(refused="true")))
    assert "phone" in describe(summary(req)) and "REJECTED (every connection refused)" in describe(summary(req))
    back = records.from_json(json.loads(json.dumps(records.to_json(req))))
    assert [c.reject for c in back.cohorts] == [True, False]


@pytest.mark.parametrize("make,message", [
    (lambda: service.make_request("r0", hosts="198.18.1.2", per="host", rate="1mbit", mode="shape", blackhole=True,
                                  reject=True), "--reject: not with --blackhole"),
    (lambda: scenario.parse(TWO.format(refused='"yes"')), "scenario: [cohort.phone] reject: yes is not true or false"),
    (lambda: service.make_request("r;0", hosts="198.18.1.2", per="host", rate="1mbit", reject=True),
     "--reject: interface: r;0 has characters nft does not take in a name"),
    (lambda: service.make_request("r0", scenario=scenario.parse(TWO.format(refused="false") + DEFAULT)),
     "cohort 'default': --reject: needs hosts"),
])
def test_a_bad_reject_is_one_line(make, message):
    with pytest.raises(UsageError) as err:
        make()
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_dry_run_prints_the_rules(capsys):
    from ratelimit.cli.main import main
    assert main(["--if", "r0", "-h", "198.18.1.2", "--per", "host", "--rate", "1mbit", "--reject", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "REJECTED" in out and "nft -f - <<'EOF'\ntable inet ratelimit_r0\n" in out
    assert out.rstrip().endswith("}\nEOF")
