#!/bin/sh
# ratelimit lab router: serve the router's links to the monitoring, read-only.
#
# Runs `ratelimit web --read-only` as the systemd service ratelimit-web on the
# lab network, watching the interface that faces the clients.  Prometheus (on
# the server, see prometheus.sh) scrapes its /metrics.  Nothing can be changed
# through it (--read-only); --allow-host names the scraper.  Run again, it
# restarts the service with the new settings.
#
#   RL_LISTEN=198.19.0.11:8080 RL_CLIENT_ADDR=198.18.1.2 RL_ALLOW_HOSTS=198.19.0.2 sh web.sh
#
# Environment:
#   RL_LISTEN       IPv4:PORT to serve on (required), e.g. this router's server-network address
#   RL_CLIENT_ADDR  this router's address on the client network: the interface holding it
#                   is the one watched (required)
#   RL_ALLOW_HOSTS  comma-separated names or addresses for --allow-host: the scraper
#                   (the server's address) and any other name the dashboard is reached by
#   RL_INTERVAL     seconds between two reads of the router's counters, 1-60 (default 5:
#                   as often as Prometheus scrapes; reading thousands of links costs a
#                   software-emulated router about a second)
#   RL_RATELIMIT    the ratelimit command (default /opt/ratelimit/bin/ratelimit, else PATH)
set -eu

RL_INTERVAL=${RL_INTERVAL:-5}
RL_LISTEN=${RL_LISTEN:-}
RL_CLIENT_ADDR=${RL_CLIENT_ADDR:-}
RL_ALLOW_HOSTS=${RL_ALLOW_HOSTS:-}
UNIT=/etc/systemd/system/ratelimit-web.service

fail() { echo "web.sh: $*" >&2; exit 2; }

is_ipv4() {
    case "$1" in '' | *[!0-9.]* | .* | *. | *..*) return 1 ;; esac
    [ "$(echo "$1" | tr -cd . | wc -c)" -eq 3 ] || return 1
    for octet in $(echo "$1" | tr . ' '); do
        [ "$octet" -le 255 ] || return 1
    done
}

host=${RL_LISTEN%:*}
port=${RL_LISTEN##*:}
is_ipv4 "$host" || fail "RL_LISTEN: '$RL_LISTEN' is not IPV4:PORT (e.g. 198.19.0.11:8080)"
case "$port" in '' | *[!0-9]*) fail "RL_LISTEN: '$RL_LISTEN' has no valid port (1-65535)" ;; esac
[ "$port" -ge 1 ] && [ "$port" -le 65535 ] || fail "RL_LISTEN: '$RL_LISTEN' has no valid port (1-65535)"
is_ipv4 "$RL_CLIENT_ADDR" || fail "RL_CLIENT_ADDR: '$RL_CLIENT_ADDR' is not an IPv4 address (this router's, on the client network)"
case "$RL_ALLOW_HOSTS" in
    *[!A-Za-z0-9.,:-]*) fail "RL_ALLOW_HOSTS: '$RL_ALLOW_HOSTS' is not a comma-separated list of names or addresses" ;;
esac
case "$RL_INTERVAL" in '' | *[!0-9]*) fail "RL_INTERVAL: '$RL_INTERVAL' is not a whole number of seconds (1-60)" ;; esac
[ "$RL_INTERVAL" -ge 1 ] && [ "$RL_INTERVAL" -le 60 ] || fail "RL_INTERVAL: '$RL_INTERVAL' is not a whole number of seconds (1-60)"
command -v systemctl >/dev/null 2>&1 || fail "systemctl: not found (web.sh runs ratelimit web as a systemd service)"

ip -o -4 addr show | awk -v a="$host" '{ split($4, p, "/"); if (p[1] == a) found = 1 } END { exit !found }' \
    || fail "RL_LISTEN: '$host' is not an address of this machine (see: ip -4 addr)"
dev=$(ip -o -4 addr show | awk -v a="$RL_CLIENT_ADDR" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }')
[ -n "$dev" ] || fail "RL_CLIENT_ADDR: '$RL_CLIENT_ADDR' is not an address of this machine (see: ip -4 addr)"

if [ -n "${RL_RATELIMIT:-}" ]; then
    ratelimit=$RL_RATELIMIT
elif [ -x /opt/ratelimit/bin/ratelimit ]; then
    ratelimit=/opt/ratelimit/bin/ratelimit
else
    ratelimit=$(command -v ratelimit) || fail "ratelimit is not installed (router.sh with RL_INSTALL=1 installs it)"
fi
case "$ratelimit" in /*) ;; *) fail "RL_RATELIMIT: '$ratelimit' is not an absolute path" ;; esac

allow=""
for name in $(echo "$RL_ALLOW_HOSTS" | tr ',' ' '); do
    allow="$allow --allow-host $name"
done

# root: the statistics come from netlink and ratelimit's state in /run/ratelimit
cat > "$UNIT" <<EOF
# written by ratelimit vagrant/provision/web.sh
[Unit]
Description=ratelimit web --read-only (the lab's monitoring: /metrics for Prometheus)
After=network-online.target

[Service]
ExecStart=$ratelimit web --read-only --interface $dev --listen $host:$port --interval $RL_INTERVAL$allow
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
EOF
systemctl daemon-reload
systemctl enable ratelimit-web.service >/dev/null 2>&1
systemctl restart ratelimit-web.service

# ready when /metrics answers (Python starts slowly under software emulation)
i=0
until curl -fsS -o /dev/null --max-time 5 "http://$host:$port/metrics" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 120 ] || ! systemctl is-active -q ratelimit-web.service; then
        journalctl -u ratelimit-web.service -n 5 --no-pager >&2 2>/dev/null || true
        fail "ratelimit web did not answer on http://$host:$port/metrics (journalctl -u ratelimit-web)"
    fi
    sleep 0.5
done
echo "web: ratelimit web --read-only on http://$host:$port/ ($dev; /metrics for Prometheus; allowed hosts: ${RL_ALLOW_HOSTS:-none})"
