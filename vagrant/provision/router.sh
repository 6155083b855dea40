#!/bin/sh
# ratelimit lab router: install ratelimit from the checkout, forward, apply a profile.
#
# Vagrant runs it twice on each router VM: once to install (RL_APPLY=0), and
# on every `vagrant up` / `vagrant provision --provision-with profile` to apply
# $RL_PROFILE on the interface that faces the clients (RL_INSTALL=0).  The
# test suite runs it inside a router network namespace with RL_INSTALL=0.
#
#   RL_CLIENT_ADDR=198.18.1.2 RL_CLIENT_HOSTS=198.18.1.11 RL_PROFILE=modem-28k8 sh router.sh
#
# Environment:
#   RL_CLIENT_ADDR   this router's address on the client network: the interface
#                    holding it is the one limited (required to apply)
#   RL_CLIENT_HOSTS  client addresses, comma-separated (required to apply)
#   RL_PROFILE       link profile (default modem-28k8; see `ratelimit profiles`)
#   RL_MODE          shape or police (default shape: queue like the link)
#   RL_PORTS         client port range limited (default 10000-10999, as client.sh sets)
#   RL_BURST         --burst: v0.3's N, bytes (3kb) or a time (20ms) (default: the profile's)
#   RL_ARGS          further ratelimit options, e.g. "--delay 0ms" (default none)
#   RL_INSTALL       1: apt-get python3-venv and pip-install ratelimit from RL_SRC into
#                    /opt/ratelimit (default 1); 0: use ratelimit as found
#   RL_APPLY         1: apply the profile (default 1); 0: only install and forward
#   RL_PERSIST       1: make IP forwarding permanent in /etc/sysctl.d (default 0)
#   RL_SRC           ratelimit checkout (default: two directories above this script)
#   RL_PYTHON        interpreter for `-m ratelimit` when the command is not installed
#   RL_RATELIMIT     the ratelimit command (default /opt/ratelimit/bin/ratelimit if
#                    installed, else RL_PYTHON -m ratelimit from RL_SRC, else PATH)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
RL_SRC=${RL_SRC:-$(cd "$here/../.." && pwd)}
RL_PROFILE=${RL_PROFILE:-modem-28k8}
RL_MODE=${RL_MODE:-shape}
RL_PORTS=${RL_PORTS:-10000-10999}
RL_BURST=${RL_BURST:-}
RL_ARGS=${RL_ARGS:-}
RL_INSTALL=${RL_INSTALL:-1}
RL_APPLY=${RL_APPLY:-1}
RL_PERSIST=${RL_PERSIST:-0}
RL_PYTHON=${RL_PYTHON:-python3}
RL_CLIENT_ADDR=${RL_CLIENT_ADDR:-}
RL_CLIENT_HOSTS=${RL_CLIENT_HOSTS:-}

fail() { echo "router.sh: $*" >&2; exit 2; }

# sha256 of the package's sources in checkout $1 (what setup.py packages);
# the same function is in vagrant/box/customize.sh
src_hash() {
    (cd "$1" && find setup.py pyproject.toml README.md ratelimit webui profiles vagrant/provision \
        -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*/node_modules/*' 2>/dev/null \
        | LC_ALL=C sort | xargs -d '\n' sha256sum) | sha256sum | cut -d ' ' -f 1
}

case "$RL_MODE" in police | shape) ;; *) fail "RL_MODE: '$RL_MODE' is not a mode (police, shape)" ;; esac

if [ "$RL_INSTALL" = 1 ]; then
    export DEBIAN_FRONTEND=noninteractive
    if ! command -v tc >/dev/null 2>&1 || ! "$RL_PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt-get update -q
        apt-get install -y -q --no-install-recommends iproute2 python3 python3-venv python3-pip
    fi
    [ -x /opt/ratelimit/bin/pip ] || "$RL_PYTHON" -m venv /opt/ratelimit
    # a copy of the checkout, so a read-only or rsync'ed synced folder is fine
    build=$(mktemp -d)
    tar -C "$RL_SRC" --exclude=.git --exclude=.vagrant -cf - . | tar -C "$build" -xf -
    # what pip installed last (vagrant/box/customize.sh stamps the box's copy the same
    # way): the same package sources need no reinstall
    stamp=/opt/ratelimit/ratelimit-src.sha256
    sum=$(src_hash "$build")
    if [ -x /opt/ratelimit/bin/ratelimit ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
        echo "router: /opt/ratelimit has ratelimit from these sources already"
    else
        # a venv that has the build backend already (the lab's box) builds without a
        # throwaway build environment: offline, and seconds instead of half a minute
        # under software emulation
        isolation=""
        if /opt/ratelimit/bin/python -c 'import setuptools, wheel' >/dev/null 2>&1; then
            isolation=--no-build-isolation
        fi
        /opt/ratelimit/bin/pip install -q --upgrade ${isolation:+"$isolation"} "$build"
        echo "$sum" > "$stamp"
    fi
    rm -rf "$build"
    ln -sf /opt/ratelimit/bin/ratelimit /usr/local/bin/ratelimit
    # every tc part a profile may need; a stock kernel has them all as modules
    for mod in sch_htb sch_netem sch_ingress cls_u32 act_police act_mirred ifb; do
        modprobe -q "$mod" 2>/dev/null || true
    done
fi

echo 1 > /proc/sys/net/ipv4/ip_forward
if [ "$RL_PERSIST" = 1 ]; then
    printf '# written by ratelimit vagrant/provision/router.sh\nnet.ipv4.ip_forward = 1\n' \
        > /etc/sysctl.d/60-ratelimit-router.conf
fi

[ "$RL_APPLY" = 1 ] || { echo "router: ratelimit installed, forwarding on"; exit 0; }

[ -n "$RL_CLIENT_ADDR" ] || fail "RL_CLIENT_ADDR: none given (this router's address on the client network)"
[ -n "$RL_CLIENT_HOSTS" ] || fail "RL_CLIENT_HOSTS: none given (client addresses, comma-separated)"
dev=$(ip -o -4 addr show | awk -v a="$RL_CLIENT_ADDR" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }')
[ -n "$dev" ] || fail "RL_CLIENT_ADDR: '$RL_CLIENT_ADDR' is not an address of this machine (see: ip -4 addr)"

if [ -n "${RL_RATELIMIT:-}" ]; then
    # shellcheck disable=SC2086
    set -- $RL_RATELIMIT
elif [ -x /opt/ratelimit/bin/ratelimit ]; then  # what RL_INSTALL=1 installed
    set -- /opt/ratelimit/bin/ratelimit
elif [ -d "$RL_SRC/ratelimit" ]; then  # run from the checkout
    export PYTHONPATH="$RL_SRC${PYTHONPATH:+:$PYTHONPATH}"
    set -- "$RL_PYTHON" -m ratelimit
elif command -v ratelimit >/dev/null 2>&1; then
    set -- ratelimit
else
    fail "RL_SRC: '$RL_SRC' has no ratelimit checkout and ratelimit is not installed (RL_INSTALL=1 installs it)"
fi

# shellcheck disable=SC2086
"$@" --interface "$dev" --profile "$RL_PROFILE" --mode "$RL_MODE" --hosts "$RL_CLIENT_HOSTS" \
    --ports "$RL_PORTS" ${RL_BURST:+--burst "$RL_BURST"} $RL_ARGS
echo "router: $RL_PROFILE ($RL_MODE) on $dev for $RL_CLIENT_HOSTS ports $RL_PORTS"
