#!/bin/sh
# Docker and Podman for ratelimit's container tests, on a machine without an init
# system, leaving the host's firewall, sysctls and links as they were.
#
#   sh containers/engines.sh start    # start dockerd if needed (see below), check podman
#   sh containers/engines.sh stop     # stop the dockerd this script started (never another)
#   sh containers/engines.sh status   # is dockerd up, who started it, podman's network backend
#   sh containers/engines.sh image    # build (or reuse) the test image, import it into both engines;
#                                     # prints its name
#
# dockerd, as started here (with systemd as PID 1 and docker.service present,
# `start` asks systemd instead and says so):
#
#   dockerd --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none
#
# so it adds no firewall chains and rules, leaves the FORWARD policy alone, sets no
# sysctl (net.ipv4.ip_forward stays as it was) and makes no docker0 bridge; the
# tests make their own networks (a bridge each, in 198.18.0.0/15) and remove them.
# Containers on one such network reach each other over its bridge, with no NAT and
# no route out, which is all the tests need (docs/lab.md, "Container engines").
# Its log is $RL_ENGINES_DIR/dockerd.log; dockerd starts its own containerd.
#
# Podman (rootful) needs no daemon.  Debian 12's podman 4.3 uses CNI plugins
# (containernetworking-plugins) when netavark is not installed.  `podman network
# create --internal` writes a CNI list with the portmap and firewall plugins,
# which add iptables chains; the tests write their own list instead (the bridge
# plugin alone, no gateway, no masquerading), which touches no iptables rule and
# no sysctl (docs/lab.md, "Container engines").
#
# The image (`image`): Debian bookworm minbase with nginx-light, curl and
# iproute2, made by mmdebstrap into $RL_IMAGE_CACHE/rootfs-KEY.tar (KEY: a hash
# of the package list and this script's image recipe), then `docker import` and
# `podman import` as rlct-image:KEY.  Reused while the key is the same: about
# a second when both engines have it, a few seconds to import from the cache.
#
# Environment: RL_ENGINES_DIR (default /run/ratelimit-engines), RL_IMAGE_CACHE
# (default /var/cache/ratelimit/container-image), RL_DEBIAN_MIRROR (default
# http://deb.debian.org/debian).
set -eu

RL_ENGINES_DIR=${RL_ENGINES_DIR:-/run/ratelimit-engines}
RL_IMAGE_CACHE=${RL_IMAGE_CACHE:-/var/cache/ratelimit/container-image}
RL_DEBIAN_MIRROR=${RL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
IMAGE_PACKAGES="nginx-light,curl,iproute2,procps"
DOCKER_SOCK=/var/run/docker.sock
DOCKERD_FLAGS="--iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none"

fail() { echo "engines.sh: $*" >&2; exit 2; }
say() { echo "engines.sh: $*" >&2; }

case "$RL_ENGINES_DIR" in /*) ;; *) fail "RL_ENGINES_DIR: '$RL_ENGINES_DIR' is not an absolute path" ;; esac
case "$RL_IMAGE_CACHE" in /*) ;; *) fail "RL_IMAGE_CACHE: '$RL_IMAGE_CACHE' is not an absolute path" ;; esac

docker_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

start_dockerd() {
    command -v dockerd >/dev/null 2>&1 || fail "missing: docker.io (apt-get install --no-install-recommends docker.io)"
    if docker_answers; then
        say "dockerd is already running (not started here: its flags are its owner's)"
        return
    fi
    if [ -d /run/systemd/system ] && systemctl cat docker.service >/dev/null 2>&1; then
        systemctl start docker.service
        how="started by systemd (docker.service: its own flags, iptables included)"
    else
        mkdir -p "$RL_ENGINES_DIR"
        # shellcheck disable=SC2086
        setsid dockerd $DOCKERD_FLAGS --host "unix://$DOCKER_SOCK" --pidfile "$RL_ENGINES_DIR/dockerd.pid" \
            >"$RL_ENGINES_DIR/dockerd.log" 2>&1 < /dev/null &
        echo dockerd >> "$RL_ENGINES_DIR/started"
        how="started here (no init system): dockerd $DOCKERD_FLAGS"
    fi
    i=0
    until docker_answers; do
        i=$((i + 1))
        [ $i -le 300 ] || fail "dockerd did not answer in 30 s (see $RL_ENGINES_DIR/dockerd.log)"
        sleep 0.1
    done
    say "dockerd $(docker version --format '{{.Server.Version}}' 2>/dev/null) up in $((i / 10)).$((i % 10)) s ($how)"
}

stop_dockerd() {
    file="$RL_ENGINES_DIR/started"
    if ! grep -qx dockerd "$file" 2>/dev/null; then
        say "nothing to stop (this script started no dockerd)"
        return
    fi
    pidfile="$RL_ENGINES_DIR/dockerd.pid"
    if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        pid=$(cat "$pidfile")
        kill "$pid"
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
        kill -0 "$pid" 2>/dev/null && fail "dockerd ($pid) did not stop in 20 s"
        say "stopped dockerd ($pid) in $((i / 10)).$((i % 10)) s"
    fi
    rm -f "$file"
}

podman_backend() {
    command -v podman >/dev/null 2>&1 || { echo "not installed"; return; }
    podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null || echo "unknown (podman info failed)"
}

image_key() {
    { echo "$SUITE $IMAGE_PACKAGES"; sed -n '/^build_rootfs() {/,/^}/p' "$0"; } | sha256sum | cut -c1-12
}

build_rootfs() {
    # $1: the tar to write
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        mmdebstrap --quiet --variant=minbase --format=tar --include="$IMAGE_PACKAGES" \
        --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        "$SUITE" "$1" "deb $RL_DEBIAN_MIRROR $SUITE main"
}

image() {
    command -v mmdebstrap >/dev/null 2>&1 || fail "missing: mmdebstrap (apt-get install --no-install-recommends mmdebstrap)"
    [ "$(id -u)" = 0 ] || fail "image: needs root (mmdebstrap, the engines)"
    key=$(image_key)
    name="rlct-image:$key"
    mkdir -p "$RL_IMAGE_CACHE"
    exec 9>"$RL_IMAGE_CACHE/.lock"
    flock 9
    tar="$RL_IMAGE_CACHE/rootfs-$key.tar"
    if [ ! -s "$tar" ]; then
        started=$(date +%s)
        rm -f "$RL_IMAGE_CACHE"/rootfs-*.tar
        build_rootfs "$tar.tmp" || { rm -f "$tar.tmp"; fail "image: mmdebstrap failed (see above)"; }
        mv "$tar.tmp" "$tar"
        say "built $tar ($(du -m "$tar" | cut -f1) MB) in $(( $(date +%s) - started )) s"
    fi
    if command -v docker >/dev/null 2>&1 && docker_answers; then
        if ! docker image inspect "$name" >/dev/null 2>&1; then
            docker import --change 'CMD ["/bin/sh"]' "$tar" "$name" >/dev/null
            say "imported $name into docker"
        fi
    fi
    if command -v podman >/dev/null 2>&1; then
        if ! podman image exists "localhost/$name"; then
            podman import --quiet --change 'CMD ["/bin/sh"]' "$tar" "localhost/$name" >/dev/null
            say "imported localhost/$name into podman"
        fi
    fi
    echo "$name"
}

case "${1:-}" in
    start)
        [ "$(id -u)" = 0 ] || fail "needs root (it starts dockerd)"
        start_dockerd
        command -v podman >/dev/null 2>&1 && say "podman $(podman version --format '{{.Client.Version}}' 2>/dev/null), network backend: $(podman_backend)"
        ;;
    stop) stop_dockerd ;;
    status)
        if docker_answers; then echo "dockerd: up ($(docker version --format '{{.Server.Version}}'))"; else echo "dockerd: not answering on $DOCKER_SOCK"; fi
        grep -qx dockerd "$RL_ENGINES_DIR/started" 2>/dev/null && echo "started by this script"
        echo "podman: network backend $(podman_backend)"
        ;;
    image) image ;;
    *) fail "'${1:-}' is not a command (start, stop, status, image)" ;;
esac
