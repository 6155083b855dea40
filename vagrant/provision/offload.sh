#!/bin/sh
# ratelimit lab router: one packet per frame on the lab's interfaces.
#
# With GRO a VM's virtio NIC hands the router merged "super packets" (2-45
# frames of one TCP flow).  The shaper and the policer then see one big packet:
# HTB lets it through whenever its bucket is above zero (a 10,000-byte download
# through modem-28k8 then took 1.54 s instead of 1.96 s in about one run of
# three, measured), and a policer drops what exceeds its MTU.  A modem carries
# frames, so GRO, GSO and TSO go off on the interfaces holding the given
# addresses.  The setting does not survive a reboot: Vagrant runs this on every
# `vagrant up`.
#
#   RL_ADDRS=198.18.1.2,198.19.0.11 sh offload.sh
#
# Environment:
#   RL_ADDRS   comma-separated IPv4 addresses of this machine (required)
set -eu

RL_ADDRS=${RL_ADDRS:-}

fail() { echo "offload.sh: $*" >&2; exit 2; }

case "$RL_ADDRS" in '' | *[!0-9.,]*) fail "RL_ADDRS: '$RL_ADDRS' is not a comma-separated list of IPv4 addresses" ;; esac
devs=""
for addr in $(echo "$RL_ADDRS" | tr ',' ' '); do
    dev=$(ip -o -4 addr show | awk -v a="$addr" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }')
    [ -n "$dev" ] || fail "RL_ADDRS: '$addr' is not an address of this machine (see: ip -4 addr)"
    devs="$devs $dev"
done
command -v ethtool >/dev/null 2>&1 || fail "ethtool is not installed (apt-get install ethtool; the lab's box has it)"

for dev in $devs; do
    # features a driver cannot change are reported, not fatal
    ethtool -K "$dev" gro off gso off tso off 2>/dev/null || true
    if ethtool -k "$dev" | grep -q '^generic-receive-offload: on'; then
        fail "$dev: generic-receive-offload is still on (ethtool -K $dev gro off refused)"
    fi
done
echo "offload: gro, gso and tso off on$devs"
