#!/bin/sh
# ratelimit lab router: one packet per frame on the lab's interfaces.
#
# With GRO, and with virtio's receive offload (rx-gro-hw: the host hands the
# guest the sender's TSO segments unsplit), a router VM's NIC delivers merged
# "super packets" of several frames of one TCP flow.  The shaper and the policer
# then see one big packet: HTB lets it through whenever its bucket is above
# zero (a 10,000-byte download through modem-28k8 took 1.54 s instead of 1.96 s
# in 3 of 10 runs with GRO on, 2 of 20 with only GRO off, 0 of 40 with both off,
# measured), and a policer drops what exceeds its MTU.  A modem carries frames,
# so GRO, rx-gro-hw, LRO, GSO and TSO go off on the interfaces holding the given
# addresses, and on every other interface that is up (the management one):
# ratelimit's apply names every receiving device that merges frames, since it
# cannot know which ones the links' traffic comes in through.  The setting does
# not survive a reboot: Vagrant runs this on every `vagrant up`.
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
for dev in $(ip -o link show up | awk -F': ' '{ sub(/@.*/, "", $2); if ($2 != "lo") print $2 }'); do
    case "$devs " in *" $dev "*) ;; *) devs="$devs $dev" ;; esac
done
command -v ethtool >/dev/null 2>&1 || fail "ethtool is not installed (apt-get install ethtool; the lab's box has it)"

for dev in $devs; do
    # one feature at a time: a driver without one (or with it fixed) refuses only that one
    for feature in gro rx-gro-hw lro gso tso; do
        ethtool -K "$dev" "$feature" off 2>/dev/null || true
    done
    for name in generic-receive-offload rx-gro-hw large-receive-offload; do
        if ethtool -k "$dev" | grep -qx "$name: on"; then
            fail "$dev: $name is still on (ethtool -K $dev refused to turn it off)"
        fi
    done
done
echo "offload: gro, rx-gro-hw, lro, gso and tso off on$devs"
