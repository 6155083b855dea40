#!/bin/bash
# Build the Vagrant lab's box from Debian packages and add it to Vagrant.
#
#   bash vagrant/box/build.sh            # build (or reuse) and `vagrant box add` ratelimit/bookworm64
#   bash vagrant/box/build.sh --force    # rebuild everything, the cached root file system too
#   bash vagrant/box/build.sh --remove   # remove the box from Vagrant and libvirt, and the cache
#
# The box: Debian bookworm with Debian's stock kernel (every tc module), booted
# by syslinux from a small FAT partition, root on ext4, as a vagrant-libvirt
# qcow2 box.  Preinstalled: iproute2, nginx-light, httperf, wrk, curl,
# prometheus, python3, rsync, and in /opt/ratelimit a venv with ratelimit from
# this checkout and its Python dependencies (setup.py's install_requires, as
# wheels; /etc/pip.conf points pip at /opt/ratelimit-wheels, so reinstalling
# ratelimit in a VM works offline).  The VMs need no network but the lab's own.
#
# Stages, one progress line each on stderr:
#   1 tools    the host's tools are there (else: the apt-get line that installs them)
#   2 wheels   pip download of the Python dependencies for the guest's Python 3.11
#   3 rootfs   mmdebstrap bookworm + customize.sh -> rootfs-KEY.tar   (cached by KEY)
#   4 disk     a raw MBR disk: FAT boot partition (syslinux, kernel, initrd) + ext4 root,
#              made without mounting anything (mtools, mkfs.ext4 -d)
#   5 qcow2    qemu-img convert (sparse, not compressed)
#   6 box      box.img + metadata.json + Vagrantfile -> ratelimit-bookworm64-KEY.box
#   7 add      vagrant box add --force; stale uploads of older builds leave libvirt's pool
#
# Idempotent and cached: KEY is a hash of this script, customize.sh, the package
# list and the Python requirements.  If Vagrant already has the box built from
# the same KEY, nothing is done (about a second); if only this script's later
# stages changed, the cached root file system is reused.  The ratelimit code in
# the box is the checkout as it was when the root file system was built: the
# Vagrantfile's routers reinstall ratelimit from the synced checkout when they
# are provisioned, so code changes do not need a new box (--force makes one).
#
# Environment:
#   RL_BOX_NAME        box name (default ratelimit/bookworm64)
#   RL_BOX_CACHE       cache directory (default /var/cache/ratelimit/vagrant-box)
#   RL_DEBIAN_MIRROR   Debian mirror (default http://deb.debian.org/debian)
#   RL_DEBIAN_SECURITY security mirror (default http://deb.debian.org/debian-security)
#   VAGRANT_HOME       Vagrant's own directory (default ~/.vagrant.d): the added box lives there
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
RL_BOX_NAME=${RL_BOX_NAME:-ratelimit/bookworm64}
RL_BOX_CACHE=${RL_BOX_CACHE:-/var/cache/ratelimit/vagrant-box}
RL_DEBIAN_MIRROR=${RL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
RL_DEBIAN_SECURITY=${RL_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
SUITE=bookworm
GUEST_PYTHON=3.11      # bookworm's python3
DISK_GB=4              # virtual size of the disk (the root file system uses about 650 MB)
BOOT_MB=64             # FAT boot partition: syslinux, vmlinuz, initrd.img
URI=qemu:///system
STAGES=7

PACKAGES=(
    # boot and base system
    linux-image-amd64 initramfs-tools systemd-sysv udev dbus kmod procps iproute2 iputils-ping
    netbase less sudo openssh-server rsync ca-certificates
    # the lab
    nginx-light httperf wrk curl prometheus python3 python3-venv ethtool tcpdump
)
# kernel module trees a virtio VM never loads (about 100 MB less)
MODULE_EXCLUDES=(drivers/gpu drivers/media drivers/net/wireless drivers/net/ethernet drivers/infiniband
                 drivers/staging drivers/iio drivers/isdn drivers/bluetooth sound net/wireless net/mac80211
                 net/bluetooth)

fail() { echo "build.sh: $*" >&2; exit 2; }
say() { echo "build.sh: $*" >&2; }

force=0
remove=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --remove) remove=1 ;;
        --help | -h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) fail "'$arg' is not an option (--force, --remove, --help)" ;;
    esac
done
[[ "$RL_BOX_NAME" =~ ^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*$ ]] \
    || fail "RL_BOX_NAME: '$RL_BOX_NAME' is not a box name (OWNER/NAME: a-z, 0-9, '.', '_', '-')"
[[ "$RL_BOX_CACHE" == /* ]] || fail "RL_BOX_CACHE: '$RL_BOX_CACHE' is not an absolute path"
[ "$(id -u)" = 0 ] || fail "needs root (mmdebstrap, chroot, and vagrant-libvirt's qemu:///system)"

box_slug=${RL_BOX_NAME//\//-VAGRANTSLASH-}
box_file_prefix=${RL_BOX_NAME//\//-}
vagrant_home=${VAGRANT_HOME:-$HOME/.vagrant.d}

# vagrant-libvirt uploads a box into libvirt's pool "default" once (on the first
# `vagrant up`), named <box>_vagrant_box_image_<version>_<add time>_box.img; every
# VM's disk is a copy-on-write overlay of it.  Delete the uploads no disk uses.
drop_stale_uploads() {
    virsh -c "$URI" pool-info default >/dev/null 2>&1 || return 0
    local vols v path used o
    vols=$(virsh -c "$URI" vol-list default 2>/dev/null | awk 'NR > 2 && $1 != "" { print $1 }')
    for v in $vols; do
        [[ "$v" == "${box_slug}_vagrant_box_image_"* ]] || continue
        path=$(virsh -c "$URI" vol-path --pool default "$v")
        used=no
        for o in $vols; do
            [ "$o" != "$v" ] || continue
            if virsh -c "$URI" vol-dumpxml --pool default "$o" 2>/dev/null | grep -qF "<path>$path</path>"; then
                used=yes
            fi
        done
        if [ "$used" = no ]; then
            virsh -c "$URI" vol-delete --pool default "$v" >/dev/null
            say "deleted the unused upload $v from libvirt's pool default"
        else
            say "kept $v in libvirt's pool default: a VM disk still uses it"
        fi
    done
}

if [ "$remove" = 1 ]; then
    if command -v vagrant >/dev/null && vagrant box list 2>/dev/null | grep -q "^$RL_BOX_NAME "; then
        vagrant box remove --force --all "$RL_BOX_NAME"
    fi
    drop_stale_uploads
    rm -rf "$RL_BOX_CACHE"
    say "removed box $RL_BOX_NAME and the cache $RL_BOX_CACHE"
    exit 0
fi

mkdir -p "$RL_BOX_CACHE"
exec 9>"$RL_BOX_CACHE/.lock"
flock -n 9 || { say "another build.sh is running on $RL_BOX_CACHE: waiting"; flock 9; }

n=0
t_stage=0
t_all=$(date +%s.%N)
stage() {  # stage NAME TEXT: the progress line of the next stage
    n=$((n + 1))
    t_stage=$(date +%s.%N)
    say "[$n/$STAGES] $1: $2"
}
done_stage() {  # done_stage TEXT
    say "[$n/$STAGES] done in $(awk -v a="$t_stage" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s${1:+: $1}"
}

# ------------------------------------------------------------------ 1 tools
stage tools "checking the host's tools"
missing=""
for pair in mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs mkfs.vfat:dosfstools mcopy:mtools syslinux:syslinux \
            sfdisk:fdisk qemu-img:qemu-utils vagrant:vagrant flock:util-linux \
            virsh:libvirt-clients; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
done
[ -e /usr/lib/syslinux/mbr/mbr.bin ] || missing="$missing syslinux-common"
vagrant plugin list 2>/dev/null | grep -q vagrant-libvirt || missing="$missing vagrant-libvirt"
# a Python 3.11+ with pip reads setup.py and downloads the guest's wheels: python3, else python
host_python=""
for py in python3 python; do
    if "$py" -c 'import tomllib' >/dev/null 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then
        host_python=$py
        break
    fi
done
[ -z "$missing" ] || fail "missing:$missing (apt-get install --no-install-recommends$missing)"
[ -n "$host_python" ] || fail "no Python 3.11 or later with pip as python3 or python (apt-get install python3-pip)"
insecure_key=""
for k in /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub \
         /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub \
         /opt/vagrant/embedded/gems/vagrant-*/keys/vagrant.pub; do
    [ -s "$k" ] && { insecure_key=$k; break; }
done
[ -n "$insecure_key" ] || fail "Vagrant's insecure public key (keys/vagrant.pub in the vagrant gem) was not found"
done_stage "vagrant $(vagrant --version 2>/dev/null | awk '{ print $2 }'), key $insecure_key"

# ------------------------------------------------------------------ inputs and the cache
requirements=$("$host_python" - "$ROOT/setup.py" "$ROOT/pyproject.toml" <<'EOF'
import ast, sys, tomllib
reqs = []
for node in ast.walk(ast.parse(open(sys.argv[1]).read())):
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
        for kw in node.keywords:
            if kw.arg == "install_requires":
                reqs += ast.literal_eval(kw.value)
with open(sys.argv[2], "rb") as f:
    reqs += tomllib.load(f).get("build-system", {}).get("requires", [])
reqs.append("wheel")
if not any(r.startswith("pyroute2") for r in reqs):
    sys.exit("build.sh: setup.py: no install_requires found")
print("\n".join(dict.fromkeys(reqs)))
EOF
) || fail "could not read the Python requirements from setup.py and pyproject.toml"

rootfs_key=$( { cat "$here/customize.sh"; echo "${PACKAGES[*]}"; echo "${MODULE_EXCLUDES[*]}";
                echo "$requirements"; echo "$SUITE $GUEST_PYTHON"; } | sha256sum | cut -c1-16)
key=$( { echo "$rootfs_key"; cat "$0"; } | sha256sum | cut -c1-16)
box_file="$RL_BOX_CACHE/$box_file_prefix-$key.box"
rootfs_tar="$RL_BOX_CACHE/rootfs-$rootfs_key.tar"

added_key=""
for f in "$vagrant_home/boxes/$box_slug"/*/libvirt/ratelimit-box-key; do
    [ -s "$f" ] && added_key=$(cat "$f")
done
if [ "$force" = 0 ] && [ "$added_key" = "$key" ]; then
    say "box $RL_BOX_NAME is up to date (key $key): nothing to do ($(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s)"
    exit 0
fi

work=$(mktemp -d "$RL_BOX_CACHE/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ "$force" = 0 ] && [ -s "$box_file" ]; then
    for s in wheels rootfs disk qcow2 box; do
        stage "$s" "cached: $box_file"
        done_stage
    done
else
    [ "$force" = 0 ] || rm -f "$RL_BOX_CACHE"/rootfs-*.tar "$RL_BOX_CACHE"/*.box

    # -------------------------------------------------------------- 2 wheels
    wheels="$RL_BOX_CACHE/wheels-$rootfs_key"
    if [ -s "$rootfs_tar" ]; then
        stage wheels "cached in the root file system"
        done_stage
    else
        stage wheels "pip download for CPython $GUEST_PYTHON: $(echo "$requirements" | tr '\n' ' ')"
        rm -rf "$RL_BOX_CACHE"/wheels-*
        mkdir -p "$wheels.tmp"
        mapfile -t reqs <<< "$requirements"
        "$host_python" -m pip download -q --dest "$wheels.tmp" --only-binary=:all: \
            --python-version "$GUEST_PYTHON" --implementation cp --abi "cp${GUEST_PYTHON/./}" \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 "${reqs[@]}" \
            || { rm -rf "$wheels.tmp"; fail "wheels: pip download failed (network? see above)"; }
        mv "$wheels.tmp" "$wheels"
        done_stage "$(ls "$wheels" | wc -l) wheels in $wheels"
    fi

    # -------------------------------------------------------------- 3 rootfs
    if [ -s "$rootfs_tar" ]; then
        stage rootfs "cached: $rootfs_tar"
        done_stage
    else
        stage rootfs "mmdebstrap $SUITE, ${#PACKAGES[@]} packages and their dependencies (about 1-2 minutes)"
        rm -f "$RL_BOX_CACHE"/rootfs-*.tar
        # the checkout, as setup.py packages it
        src_tar="$work/ratelimit-src.tar"
        tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' --exclude=node_modules --exclude=.vagrant \
            -cf "$src_tar" setup.py pyproject.toml README.md ratelimit webui profiles vagrant/provision
        excludes=()
        for d in "${MODULE_EXCLUDES[@]}"; do excludes+=("--dpkgopt=path-exclude=/lib/modules/*/kernel/$d/*"); done
        hook=$(printf 'sh %q "$1" %q %q %q' "$here/customize.sh" "$insecure_key" "$wheels" "$src_tar")
        # no host environment for dpkg/apt/pip in there (PIP_*, PYTHON* would leak in)
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
            mmdebstrap --quiet --variant=minbase --format=tar \
            --include="$(IFS=,; echo "${PACKAGES[*]}")" \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
            --dpkgopt='path-exclude=/usr/share/javascript/moment-timezone/data/*' \
            "${excludes[@]}" \
            --customize-hook="$hook" \
            "$SUITE" "$rootfs_tar.tmp" \
            "deb $RL_DEBIAN_MIRROR $SUITE main" "deb $RL_DEBIAN_MIRROR $SUITE-updates main" \
            "deb $RL_DEBIAN_SECURITY $SUITE-security main" \
            || { rm -f "$rootfs_tar.tmp"; fail "rootfs: mmdebstrap failed (see above)"; }
        mv "$rootfs_tar.tmp" "$rootfs_tar"
        done_stage "$(du -m "$rootfs_tar" | cut -f1) MB"
    fi

    # -------------------------------------------------------------- 4 disk
    stage disk "raw ${DISK_GB} GiB disk: syslinux + kernel on FAT, root on ext4"
    rootdir="$work/rootfs"
    mkdir "$rootdir"
    tar -C "$rootdir" --numeric-owner --xattrs --xattrs-include='*' -xpf "$rootfs_tar"
    kernels=("$rootdir"/boot/vmlinuz-*)
    initrds=("$rootdir"/boot/initrd.img-*)
    [ ${#kernels[@]} = 1 ] && [ -s "${kernels[0]}" ] && [ ${#initrds[@]} = 1 ] && [ -s "${initrds[0]}" ] \
        || fail "disk: expected one kernel and one initrd in the root file system's /boot"
    cp "${kernels[0]}" "$work/vmlinuz"
    cp "${initrds[0]}" "$work/initrd.img"
    kernel_release=${kernels[0]##*/vmlinuz-}
    cat > "$work/syslinux.cfg" <<'EOF'
SERIAL 0 115200
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND root=LABEL=rlroot ro fsck.mode=skip console=ttyS0,115200n8 net.ifnames=0 biosdevname=0 quiet mitigations=off
EOF
    sector=512
    boot_start=2048                                   # 1 MiB
    boot_sectors=$((BOOT_MB * 1024 * 1024 / sector))
    root_start=$((boot_start + boot_sectors))
    total_sectors=$((DISK_GB * 1024 * 1024 * 1024 / sector))
    root_sectors=$((total_sectors - root_start))
    mkfs.vfat -n RLBOOT -C "$work/boot.fat" $((boot_sectors / 2)) >/dev/null
    mcopy -i "$work/boot.fat" "$work/vmlinuz" "$work/initrd.img" "$work/syslinux.cfg" ::/
    syslinux --install "$work/boot.fat"
    mkfs.ext4 -q -L rlroot -d "$rootdir" "$work/root.ext4" $((root_sectors * sector / 1024))k >/dev/null
    rm -rf "$rootdir"
    raw="$work/disk.raw"
    truncate -s "${DISK_GB}G" "$raw"
    printf 'label: dos\nstart=%s, size=%s, type=c, bootable\nstart=%s, size=%s, type=83\n' \
        "$boot_start" "$boot_sectors" "$root_start" "$root_sectors" | sfdisk -q "$raw"
    dd if=/usr/lib/syslinux/mbr/mbr.bin of="$raw" bs=440 count=1 conv=notrunc status=none
    dd if="$work/boot.fat" of="$raw" bs=$sector seek=$boot_start conv=notrunc,sparse status=none
    dd if="$work/root.ext4" of="$raw" bs=1M seek=$((root_start * sector / 1024 / 1024)) conv=notrunc,sparse status=none
    rm -f "$work/boot.fat" "$work/root.ext4"
    # the kernel, kept for libvirt.sh's KVM probe
    cp "$work/vmlinuz" "$RL_BOX_CACHE/vmlinuz"
    done_stage "kernel $kernel_release"

    # -------------------------------------------------------------- 5 qcow2
    # not compressed: compressing took 19 s of one CPU for 250 MB instead of about 700 MB of
    # a box that never leaves this machine (vagrant box add and the upload into libvirt's
    # pool copy either in a second or two)
    stage qcow2 "qemu-img convert (sparse, not compressed)"
    mkdir "$work/box"
    qemu-img convert -O qcow2 "$raw" "$work/box/box.img"
    rm -f "$raw"
    done_stage "$(du -m "$work/box/box.img" | cut -f1) MB"

    # -------------------------------------------------------------- 6 box
    stage box "metadata and the box's Vagrantfile"
    printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %s}\n' "$DISK_GB" > "$work/box/metadata.json"
    echo "$key" > "$work/box/ratelimit-box-key"
    cat > "$work/box/Vagrantfile" <<'EOF'
# The ratelimit lab's box (vagrant/box/build.sh): Debian bookworm, stock kernel,
# the lab's tools.  Defaults for libvirt's software emulation; the project's
# Vagrantfile chooses KVM where it works.
Vagrant.configure("2") do |config|
  config.vm.synced_folder ".", "/vagrant", disabled: true
  config.vm.boot_timeout = 900
  # Vagrant's guest detection costs ~25 probes over ssh, 0.3 s each under software emulation
  config.vm.guest = :debian
  # the lab's VMs sit on isolated libvirt networks: keep the well-known key (no key swap per VM)
  config.ssh.insert_key = false
  config.vm.provider :libvirt do |lv|
    lv.driver = "qemu"
    lv.cpu_mode = "custom"
    lv.cpu_model = "qemu64"
    lv.memory = 512
    lv.cpus = 1
    lv.disk_bus = "virtio"
    lv.nic_model_type = "virtio"
    lv.graphics_type = "none"
  end
end
EOF
    rm -f "$RL_BOX_CACHE"/*.box
    tar -C "$work/box" -cf "$box_file.tmp" metadata.json Vagrantfile ratelimit-box-key box.img
    mv "$box_file.tmp" "$box_file"
    done_stage "$(du -m "$box_file" | cut -f1) MB: $box_file"
fi

# ------------------------------------------------------------------ 7 add
stage add "vagrant box add --force $RL_BOX_NAME"
vagrant box add --force --name "$RL_BOX_NAME" "$box_file" >"$work/add.log" 2>&1 \
    || { cat "$work/add.log" >&2; fail "add: vagrant box add failed (see above)"; }
drop_stale_uploads
done_stage "key $key"
say "box $RL_BOX_NAME ready in $(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s (cache: $RL_BOX_CACHE)"
