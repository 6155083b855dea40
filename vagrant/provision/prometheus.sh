#!/bin/sh
# ratelimit lab server: Prometheus (Debian's package) scraping every router.
#
# Writes /etc/prometheus/prometheus.yml with one target per router (its
# `ratelimit web --read-only`, see web.sh), labelled router="routerN", checks it
# with promtool, and (re)starts the prometheus service listening on RL_LISTEN.
# The targets come from the lab's inventory of routers (RL_INVENTORY, kept in
# /etc/ratelimit-lab/inventory.json for `demo.py inventory`), or are given.
# Run again (every `vagrant up`), it rewrites the targets and restarts.
#
#   RL_LISTEN=198.19.0.2:9090 RL_INVENTORY='{"routers": {"hosts": {"router1": {"ratelimit":
#     {"interface": "eth1", "clients": ["198.18.1.0/24"], "metrics": "198.19.0.11:8080"}}}}}' sh prometheus.sh
#   RL_LISTEN=198.19.0.2:9090 RL_TARGETS=router1=198.19.0.11:8080,router2=198.19.0.12:8080 sh prometheus.sh
#
# Environment:
#   RL_INVENTORY        the routers as an Ansible inventory's group, JSON ({"routers": {"hosts":
#                       {NAME: {"ratelimit": {..., "metrics": "IPV4:PORT"}}}}}): a target per
#                       router (ratelimit.spec.fleet.scrape_targets, from RL_SRC)
#   RL_TARGETS          without RL_INVENTORY: comma-separated NAME=IPV4:PORT, one per router
#   RL_SRC              the ratelimit checkout (default: two directories above this script)
#   RL_PYTHON           Python 3.11+ interpreter (default python3)
#   RL_LISTEN           IPV4:PORT Prometheus serves on (default 0.0.0.0:9090)
#   RL_SCRAPE_INTERVAL  seconds between scrapes, also their timeout, 1-60 (default 10: a
#                       router's /metrics with thousands of links takes seconds under
#                       software emulation when the lab is busy)
#   RL_RETENTION        how long samples are kept, e.g. 2d (default 2d)
set -eu

RL_TARGETS=${RL_TARGETS:-}
RL_INVENTORY=${RL_INVENTORY:-}
RL_SRC=${RL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
RL_PYTHON=${RL_PYTHON:-python3}
RL_LISTEN=${RL_LISTEN:-0.0.0.0:9090}
RL_SCRAPE_INTERVAL=${RL_SCRAPE_INTERVAL:-10}
RL_RETENTION=${RL_RETENTION:-2d}
CONFIG=/etc/prometheus/prometheus.yml

fail() { echo "prometheus.sh: $*" >&2; exit 2; }

is_ipv4() {
    case "$1" in '' | *[!0-9.]* | .* | *. | *..*) return 1 ;; esac
    [ "$(echo "$1" | tr -cd . | wc -c)" -eq 3 ] || return 1
    for octet in $(echo "$1" | tr . ' '); do
        [ "$octet" -le 255 ] || return 1
    done
}

is_host_port() {
    h=${1%:*}
    p=${1##*:}
    is_ipv4 "$h" || return 1
    case "$p" in '' | *[!0-9]*) return 1 ;; esac
    [ "$p" -ge 1 ] && [ "$p" -le 65535 ]
}

is_host_port "$RL_LISTEN" || fail "RL_LISTEN: '$RL_LISTEN' is not IPV4:PORT (e.g. 198.19.0.2:9090)"
case "$RL_SCRAPE_INTERVAL" in '' | *[!0-9]*) fail "RL_SCRAPE_INTERVAL: '$RL_SCRAPE_INTERVAL' is not a whole number of seconds (1-60)" ;; esac
[ "$RL_SCRAPE_INTERVAL" -ge 1 ] && [ "$RL_SCRAPE_INTERVAL" -le 60 ] \
    || fail "RL_SCRAPE_INTERVAL: '$RL_SCRAPE_INTERVAL' is not a whole number of seconds (1-60)"
case "$RL_RETENTION" in
    '' | [!0-9]* | *[!0-9smhdwy]* | *[0-9]) fail "RL_RETENTION: '$RL_RETENTION' is not a duration (e.g. 2d, 12h)" ;;
esac
if [ -n "$RL_INVENTORY" ]; then
    # shellcheck disable=SC2016
    RL_TARGETS=$(printf '%s' "$RL_INVENTORY" | PYTHONPATH="$RL_SRC" "$RL_PYTHON" -c '
import json, sys
from ratelimit.errors import RatelimitError
from ratelimit.spec.fleet import routers_of, scrape_targets
try:
    hosts = json.load(sys.stdin)["routers"]["hosts"]
    targets = scrape_targets(routers_of({name: h.get("ratelimit") for name, h in hosts.items()}))
except (ValueError, KeyError, TypeError, AttributeError) as e:
    sys.exit(f"is not an inventory with a group routers ({type(e).__name__}: {e})")
except RatelimitError as e:
    sys.exit(str(e))
print(",".join(t["labels"]["router"] + "=" + t["targets"][0] for t in targets))
' 2>&1) || fail "RL_INVENTORY: $RL_TARGETS"
    mkdir -p /etc/ratelimit-lab
    printf '%s\n' "$RL_INVENTORY" > /etc/ratelimit-lab/inventory.json
fi
[ -n "$RL_TARGETS" ] || fail "RL_TARGETS: none given (NAME=IPV4:PORT,... one per router; or RL_INVENTORY)"

# the scrape configuration: one static target per router, labelled with its name
targets=""
for t in $(echo "$RL_TARGETS" | tr ',' ' '); do
    name=${t%%=*}
    addr=${t#*=}
    case "$name" in '' | *[!a-z0-9-]*) fail "RL_TARGETS: '$t' is not NAME=IPV4:PORT (NAME: a-z, 0-9, '-')" ;; esac
    [ "$name" != "$t" ] && is_host_port "$addr" || fail "RL_TARGETS: '$t' is not NAME=IPV4:PORT (e.g. router1=198.19.0.11:8080)"
    targets="$targets      - targets: ['$addr']
        labels: {router: '$name'}
"
done
command -v prometheus >/dev/null 2>&1 || fail "prometheus is not installed (apt-get install prometheus; the lab's box has it)"
mkdir -p /etc/prometheus
cat > "$CONFIG.tmp" <<EOF
# written by ratelimit vagrant/provision/prometheus.sh: the lab's routers
global:
  scrape_interval: ${RL_SCRAPE_INTERVAL}s
  scrape_timeout: ${RL_SCRAPE_INTERVAL}s
  evaluation_interval: ${RL_SCRAPE_INTERVAL}s
scrape_configs:
  - job_name: ratelimit
    metrics_path: /metrics
    static_configs:
$targets
EOF
if command -v promtool >/dev/null 2>&1; then
    promtool check config "$CONFIG.tmp" >/dev/null || fail "promtool refused the configuration (see above)"
fi
mv "$CONFIG.tmp" "$CONFIG"

# Debian's service takes its options from /etc/default/prometheus
printf '# written by ratelimit vagrant/provision/prometheus.sh\nARGS="--web.listen-address=%s --storage.tsdb.retention.time=%s"\n' \
    "$RL_LISTEN" "$RL_RETENTION" > /etc/default/prometheus
systemctl enable prometheus.service >/dev/null 2>&1
systemctl restart prometheus.service

i=0
until curl -fsS -o /dev/null --max-time 5 "http://$RL_LISTEN/-/ready" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 240 ]; then
        journalctl -u prometheus.service -n 5 --no-pager >&2 2>/dev/null || true
        fail "Prometheus did not become ready on http://$RL_LISTEN/ (journalctl -u prometheus)"
    fi
    sleep 0.5
done
echo "prometheus: http://$RL_LISTEN/ scraping every ${RL_SCRAPE_INTERVAL} s: $(echo "$RL_TARGETS" | tr ',' ' ')"
