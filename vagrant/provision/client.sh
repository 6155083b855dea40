#!/bin/sh
# ratelimit lab client: load-generation tools and the ephemeral port range.
#
# The same script provisions a Vagrant client VM and, run inside a client
# network namespace by `ratelimit lab up`, a namespace-lab client:
#
#   Vagrant:        RL_PORTS=10000-10999 RL_PERSIST=1 RL_ROUTES="198.19.0.0/24 via 198.18.1.2" sh client.sh
#   namespace lab:  ip netns exec NS env RL_INSTALL=0 RL_PORTS=10000-10999 sh client.sh
#
# Every TCP/UDP connection a client opens gets a local port from
# net.ipv4.ip_local_port_range; the router limits exactly that range, so every
# client connection is an emulated link.  The setting is per network namespace.
#
# It also sets net.ipv4.tcp_tw_reuse=1 (RL_TW_REUSE): a port in TIME_WAIT may be
# reused for a new connection after a second instead of a minute, so a client
# keeps opening connections at a high rate from a narrow range.
#
# Environment (all optional):
#   RL_PORTS    ephemeral port range LOW-HIGH (default 10000-10999)
#   RL_TW_REUSE net.ipv4.tcp_tw_reuse: 1 (default), 0 (never reuse), 2 (loopback only)
#   RL_INSTALL  1: apt-get install the tools that are missing (default 1); 0: only check
#   RL_PERSIST  1: also write /etc/sysctl.d/60-ratelimit-lab.conf (default 0)
#   RL_ROUTES   routes to add, ';'-separated, e.g. "198.19.0.0/24 via 198.18.1.2"
set -eu

RL_PORTS=${RL_PORTS:-10000-10999}
RL_INSTALL=${RL_INSTALL:-1}
RL_PERSIST=${RL_PERSIST:-0}
RL_ROUTES=${RL_ROUTES:-}
RL_TW_REUSE=${RL_TW_REUSE:-1}
TOOLS="curl httperf wrk"

fail() { echo "client.sh: $*" >&2; exit 2; }

case "$RL_PORTS" in
    *[!0-9-]* | -* | *- | *-*-* | [!0-9]*) fail "RL_PORTS: '$RL_PORTS' is not a port range (LOW-HIGH, e.g. 10000-10999)" ;;
    *-*) ;;
    *) fail "RL_PORTS: '$RL_PORTS' is not a port range (LOW-HIGH, e.g. 10000-10999)" ;;
esac
case "$RL_TW_REUSE" in 0 | 1 | 2) ;; *) fail "RL_TW_REUSE: '$RL_TW_REUSE' is not 0, 1 or 2" ;; esac
lo=${RL_PORTS%-*}
hi=${RL_PORTS#*-}
if [ "$lo" -lt 1024 ] || [ "$hi" -gt 65535 ] || [ "$lo" -ge "$hi" ]; then
    fail "RL_PORTS: '$RL_PORTS' is not a range within 1024-65535 with LOW < HIGH"
fi

missing=""
for tool in $TOOLS; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    if [ "$RL_INSTALL" = 1 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $missing
    else
        echo "client.sh: note: not installed:$missing (RL_INSTALL=0)" >&2
    fi
fi

echo "$lo $hi" > /proc/sys/net/ipv4/ip_local_port_range
echo "$RL_TW_REUSE" > /proc/sys/net/ipv4/tcp_tw_reuse
if [ "$RL_PERSIST" = 1 ]; then
    printf '# written by ratelimit vagrant/provision/client.sh\nnet.ipv4.ip_local_port_range = %s %s\nnet.ipv4.tcp_tw_reuse = %s\n' \
        "$lo" "$hi" "$RL_TW_REUSE" > /etc/sysctl.d/60-ratelimit-lab.conf
fi

if [ -n "$RL_ROUTES" ]; then
    echo "$RL_ROUTES" | tr ';' '\n' | while read -r route; do
        # shellcheck disable=SC2086
        [ -z "$route" ] || ip route replace $route
    done
fi

echo "client: ephemeral ports $(tr '\t' '-' < /proc/sys/net/ipv4/ip_local_port_range), tcp_tw_reuse $RL_TW_REUSE"
