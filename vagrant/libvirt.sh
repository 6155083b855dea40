#!/bin/sh
# libvirt for the Vagrant lab: bring libvirtd up (also where no init system does)
# and find out whether KVM works here or the VMs need software emulation.
#
#   sh vagrant/libvirt.sh start     # start virtlogd + libvirtd if needed, then probe KVM
#   sh vagrant/libvirt.sh accel     # print kvm or qemu (the probe's verdict, cached per host boot)
#   sh vagrant/libvirt.sh status    # is libvirtd up, who started it, the verdict
#   sh vagrant/libvirt.sh stop      # stop the daemons this script started (never others), and
#                                   # remove the LIBVIRT_* firewall chains their networks left
#
# With systemd as PID 1, `start` asks systemd (libvirtd.service, from the package
# libvirt-daemon-system).  Without it (containers, our CI VMs) it starts
# `virtlogd -d` and `libvirtd -d` itself after making what libvirt-daemon-system's
# install scripts would have made: /var/log/libvirt, /var/lib/libvirt/images and
# the system user libvirt-qemu that QEMU runs as.  It records the daemons it
# started in $RL_RUN_DIR/started, and `stop` stops only those.
#
# The KVM probe: boot the Debian stock kernel (the box's, else /boot/vmlinuz-*)
# with no root file system under `qemu-system-x86_64 -accel kvm`, and wait up to
# RL_KVM_PROBE_TIMEOUT seconds (default 15) for it to panic ("Kernel panic").  A
# working KVM gets there in about a second; where /dev/kvm exists but a guest
# hangs (nested virtualization without the needed support, like our CI
# machines) nothing is printed and the verdict is qemu.  The verdict is kept in
# $RL_RUN_DIR/accel for this host boot; the Vagrantfile reads it when
# RL_LIBVIRT_DRIVER is auto (the default).
#
# Environment: RL_RUN_DIR (default /run/ratelimit-vagrant), RL_KVM_PROBE_TIMEOUT
# (1-120, default 15), RL_BOX_CACHE (where build.sh keeps the box's kernel,
# default /var/cache/ratelimit/vagrant-box).
set -eu

RL_RUN_DIR=${RL_RUN_DIR:-/run/ratelimit-vagrant}
RL_KVM_PROBE_TIMEOUT=${RL_KVM_PROBE_TIMEOUT:-15}
RL_BOX_CACHE=${RL_BOX_CACHE:-/var/cache/ratelimit/vagrant-box}
URI=qemu:///system

fail() { echo "libvirt.sh: $*" >&2; exit 2; }
say() { echo "libvirt.sh: $*" >&2; }

case "$RL_KVM_PROBE_TIMEOUT" in '' | *[!0-9]*) fail "RL_KVM_PROBE_TIMEOUT: '$RL_KVM_PROBE_TIMEOUT' is not a whole number of seconds (1-120)" ;; esac
[ "$RL_KVM_PROBE_TIMEOUT" -ge 1 ] && [ "$RL_KVM_PROBE_TIMEOUT" -le 120 ] \
    || fail "RL_KVM_PROBE_TIMEOUT: '$RL_KVM_PROBE_TIMEOUT' is not a whole number of seconds (1-120)"
case "$RL_RUN_DIR" in /*) ;; *) fail "RL_RUN_DIR: '$RL_RUN_DIR' is not an absolute path" ;; esac

need_commands() {
    missing=""
    for pair in "$@"; do
        cmd=${pair%%:*}
        pkg=${pair#*:}
        command -v "$cmd" >/dev/null 2>&1 || missing="$missing $pkg"
    done
    [ -z "$missing" ] || fail "missing:$missing (apt-get install --no-install-recommends$missing)"
}

answers() { virsh -c "$URI" version >/dev/null 2>&1; }

pid_running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

boot_id() { cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown; }

# ---------------------------------------------------------------- KVM probe
probe_kernel() {
    if [ -s "$RL_BOX_CACHE/vmlinuz" ]; then echo "$RL_BOX_CACHE/vmlinuz"; return; fi
    for k in /boot/vmlinuz-*; do
        [ -r "$k" ] && { echo "$k"; return; }
    done
    echo ""
}

probe() {
    # prints "kvm REASON" or "qemu REASON"
    if [ ! -e /dev/kvm ]; then echo "qemu no /dev/kvm"; return; fi
    if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then echo "qemu /dev/kvm is not usable by $(id -un)"; return; fi
    command -v qemu-system-x86_64 >/dev/null 2>&1 || { echo "qemu qemu-system-x86_64 is not installed"; return; }
    kernel=$(probe_kernel)
    [ -n "$kernel" ] || { echo "qemu no kernel to probe KVM with (build the box, or apt-get install linux-image-amd64)"; return; }
    out=$(mktemp)
    err=$(mktemp)
    started=$(date +%s)
    # the kernel panics (no root file system) and -no-reboot makes QEMU exit
    rc=0
    timeout "$RL_KVM_PROBE_TIMEOUT" qemu-system-x86_64 -accel kvm -m 128 -nodefaults \
        -display none -serial "file:$out" -no-reboot -kernel "$kernel" \
        -append "console=ttyS0 panic=-1" >/dev/null 2>"$err" || rc=$?
    took=$(( $(date +%s) - started ))
    if grep -q "Kernel panic" "$out"; then
        verdict="kvm a KVM guest booted (to its expected panic) in ${took} s"
    elif [ "$rc" = 124 ] && grep -q "Linux version" "$out"; then
        verdict="qemu a KVM guest started but did not finish booting in ${RL_KVM_PROBE_TIMEOUT} s"
    elif [ "$rc" = 124 ]; then
        verdict="qemu a KVM guest printed nothing in ${RL_KVM_PROBE_TIMEOUT} s (KVM hangs here)"
    else
        verdict="qemu qemu -accel kvm failed (exit $rc: $(grep -v warning "$err" | head -n 1))"
    fi
    rm -f "$out" "$err"
    echo "$verdict"
}

# the verdict for this host boot: "kvm|qemu REASON" (probed once per boot)
verdict() {
    file="$RL_RUN_DIR/accel"
    if [ "${1:-}" != fresh ] && [ -s "$file" ] && [ "$(sed -n 2p "$file")" = "$(boot_id)" ]; then
        sed -n 1p "$file"
        return
    fi
    mkdir -p "$RL_RUN_DIR"
    v=$(probe)
    printf '%s\n%s\n' "$v" "$(boot_id)" > "$file.tmp"
    mv "$file.tmp" "$file"
    echo "$v"
}

# ---------------------------------------------------------------- daemons
start_by_hand() {
    mkdir -p /var/log/libvirt /var/run/libvirt /var/lib/libvirt/images "$RL_RUN_DIR"
    # what libvirt-daemon-system's maintainer scripts make
    getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
    if ! getent passwd libvirt-qemu >/dev/null; then
        groups=""
        getent group kvm >/dev/null && groups="--groups kvm"
        # shellcheck disable=SC2086
        useradd --system --gid libvirt-qemu $groups --home-dir /var/lib/libvirt \
            --no-create-home --shell /usr/sbin/nologin libvirt-qemu
    fi
    getent group libvirt >/dev/null || groupadd --system libvirt
    if ! pid_running /var/run/virtlogd.pid; then
        virtlogd -d
        echo virtlogd >> "$RL_RUN_DIR/started"
    fi
    if ! pid_running /var/run/libvirtd.pid; then
        # libvirtd's first network adds its LIBVIRT_* chains to the host's firewall and
        # leaves them when it stops: `stop` removes them if they were not there before
        libvirt_chains_present || echo firewall >> "$RL_RUN_DIR/started"
        libvirtd -d
        echo libvirtd >> "$RL_RUN_DIR/started"
    fi
}

# ---------------------------------------------------------------- libvirt's firewall chains
# table:chain:the built-in chain that jumps to it
LIBVIRT_CHAINS="filter:LIBVIRT_INP:INPUT filter:LIBVIRT_OUT:OUTPUT filter:LIBVIRT_FWX:FORWARD
filter:LIBVIRT_FWI:FORWARD filter:LIBVIRT_FWO:FORWARD nat:LIBVIRT_PRT:POSTROUTING mangle:LIBVIRT_PRT:POSTROUTING"

libvirt_chains_present() {
    for tool in iptables ip6tables; do
        command -v $tool >/dev/null 2>&1 || continue
        for entry in $LIBVIRT_CHAINS; do
            table=${entry%%:*}; rest=${entry#*:}; chain=${rest%%:*}
            $tool -w -t "$table" -n -L "$chain" >/dev/null 2>&1 && return 0
        done
    done
    return 1
}

remove_libvirt_chains() {
    for tool in iptables ip6tables; do
        command -v $tool >/dev/null 2>&1 || continue
        for entry in $LIBVIRT_CHAINS; do
            table=${entry%%:*}; rest=${entry#*:}; chain=${rest%%:*}; from=${rest#*:}
            while $tool -w -t "$table" -D "$from" -j "$chain" 2>/dev/null; do :; done
        done
        for entry in $LIBVIRT_CHAINS; do
            table=${entry%%:*}; rest=${entry#*:}; chain=${rest%%:*}
            $tool -w -t "$table" -F "$chain" 2>/dev/null || true
            $tool -w -t "$table" -X "$chain" 2>/dev/null || true
        done
    done
}

start() {
    need_commands virsh:libvirt-clients libvirtd:libvirt-daemon dnsmasq:dnsmasq-base \
        iptables:iptables qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils
    [ -e /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so ] \
        || ls /usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so >/dev/null 2>&1 \
        || fail "missing: libvirt-daemon-driver-qemu (apt-get install --no-install-recommends libvirt-daemon-driver-qemu)"
    [ "$(id -u)" = 0 ] || fail "needs root (it starts system daemons)"
    how="already running"
    if ! answers; then
        if [ -d /run/systemd/system ] && systemctl cat libvirtd.service >/dev/null 2>&1; then
            systemctl start libvirtd.service
            how="started by systemd"
        else
            start_by_hand
            how="started here (no init system): virtlogd -d, libvirtd -d"
        fi
        # the first start probes QEMU's capabilities: about 8 s, cached afterwards
        i=0
        until answers; do
            i=$((i + 1))
            [ $i -le 600 ] || fail "libvirtd did not answer on $URI in 60 s (see /var/log/libvirt/)"
            sleep 0.1
        done
    fi
    v=$(verdict)
    say "libvirtd up ($how); accelerator ${v%% *}: ${v#* }"
}

stop() {
    file="$RL_RUN_DIR/started"
    [ -s "$file" ] || { say "nothing to stop (this script started no daemon)"; return; }
    for d in libvirtd virtlogd; do
        grep -qx "$d" "$file" || continue
        pidfile=/var/run/$d.pid
        if pid_running "$pidfile"; then
            pid=$(cat "$pidfile")
            kill "$pid"
            i=0
            while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
            say "stopped $d ($pid)"
        fi
    done
    if grep -qx firewall "$file"; then
        remove_libvirt_chains
        say "removed libvirt's LIBVIRT_* firewall chains (there were none before libvirtd started)"
    fi
    rm -f "$file"
}

status() {
    if answers; then
        echo "libvirtd: up ($(virsh -c "$URI" version 2>/dev/null | sed -n 's/^Running hypervisor: //p'))"
    else
        echo "libvirtd: not answering on $URI (sh vagrant/libvirt.sh start)"
    fi
    if [ -s "$RL_RUN_DIR/started" ]; then
        echo "started by this script: $(tr '\n' ' ' < "$RL_RUN_DIR/started")"
    fi
    if [ -s "$RL_RUN_DIR/accel" ] && [ "$(sed -n 2p "$RL_RUN_DIR/accel")" = "$(boot_id)" ]; then
        echo "accelerator: $(sed -n 1p "$RL_RUN_DIR/accel")"
    else
        echo "accelerator: not probed since this host booted (sh vagrant/libvirt.sh accel)"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    accel)
        case "${2:-}" in
            '') v=$(verdict) ;;
            --fresh) v=$(verdict fresh) ;;
            *) fail "accel: '$2' is not an option (--fresh)" ;;
        esac
        say "${v#* }"
        echo "${v%% *}"
        ;;
    *) fail "'${1:-}' is not a command (start, stop, status, accel [--fresh])" ;;
esac
