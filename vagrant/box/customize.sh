#!/bin/sh
# mmdebstrap --customize-hook of vagrant/box/build.sh: turns the fresh Debian
# root file system into the lab's box.  Runs on the host:
#
#   customize.sh ROOT VAGRANT_PUBLIC_KEY WHEEL_DIR SOURCE_TAR
#
# ROOT        the new root file system
# VAGRANT_PUBLIC_KEY   Vagrant's well-known insecure public key (vagrant.pub)
# WHEEL_DIR   ratelimit's Python dependencies as wheels (copied in: pip works offline)
# SOURCE_TAR  the ratelimit checkout (tar), installed into /opt/ratelimit
set -eu

[ $# -eq 4 ] || { echo "customize.sh: usage: customize.sh ROOT VAGRANT_PUBLIC_KEY WHEEL_DIR SOURCE_TAR" >&2; exit 2; }
R=$1
KEY=$2
WHEELS=$3
SOURCE_TAR=$4
[ -d "$R/etc" ] || { echo "customize.sh: '$R' is not a root file system" >&2; exit 2; }

# commands in the new system, with none of the host's environment (PIP_*,
# PYTHON* and the like would leak into pip in there)
chr() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 chroot "$R" "$@"; }

# sha256 of the package's sources in checkout $1 (what setup.py packages);
# the same function is in vagrant/provision/router.sh, which skips reinstalling
# ratelimit when the synced checkout has the sources the box was built from
src_hash() {
    (cd "$1" && find setup.py pyproject.toml README.md ratelimit webui profiles vagrant/provision \
        -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*/node_modules/*' 2>/dev/null \
        | LC_ALL=C sort | xargs -d '\n' sha256sum) | sha256sum | cut -d ' ' -f 1
}

# ---- the vagrant user: passwordless sudo, Vagrant's insecure key
chr useradd --create-home --shell /bin/bash --user-group vagrant
echo 'vagrant:vagrant' | chr chpasswd
printf 'vagrant ALL=(ALL) NOPASSWD: ALL\nDefaults:vagrant !requiretty\n' > "$R/etc/sudoers.d/vagrant"
chmod 0440 "$R/etc/sudoers.d/vagrant"
install -d -m 0700 "$R/home/vagrant/.ssh"
install -m 0600 "$KEY" "$R/home/vagrant/.ssh/authorized_keys"
chr chown -R vagrant:vagrant /home/vagrant/.ssh
# tc, ip and nginx are in /usr/sbin: on the vagrant user's PATH too
printf 'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n' > "$R/etc/environment"

# ---- file systems, host name
# no fsck at boot (6 s of a 30 s boot under software emulation): every VM's disk is a
# fresh copy-on-write overlay of the box
printf 'LABEL=rlroot / ext4 defaults,noatime,errors=remount-ro 0 0\n' > "$R/etc/fstab"
echo ratelimit-box > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 ratelimit-box\n::1 localhost ip6-localhost ip6-loopback\n' > "$R/etc/hosts"

# ---- network: DHCP on the management interface (eth0: net.ifnames=0); Vagrant
# configures the lab's interfaces (eth1, ...) with systemd-networkd files of its own
mkdir -p "$R/etc/systemd/network"
printf '[Match]\nName=eth0\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n\n[DHCPv4]\nClientIdentifier=mac\n' \
    > "$R/etc/systemd/network/10-eth0.network"
chr systemctl enable systemd-networkd.service >/dev/null 2>&1

# ---- sshd: one ed25519 host key made at first boot (milliseconds; the stock
# RSA 3072 + ECDSA + ed25519 took 20-50 s under software emulation with three
# VMs on two cores), no DNS lookups, keys only
rm -f "$R"/etc/ssh/ssh_host_*
mkdir -p "$R/etc/systemd/system/ssh.service.d"
printf '%s\n' '[Service]' 'ExecStartPre=' \
    "ExecStartPre=/bin/sh -c 'test -s /etc/ssh/ssh_host_ed25519_key || ssh-keygen -q -t ed25519 -N \"\" -f /etc/ssh/ssh_host_ed25519_key'" \
    'ExecStartPre=/usr/sbin/sshd -t' > "$R/etc/systemd/system/ssh.service.d/ratelimit-hostkey.conf"
printf 'HostKey /etc/ssh/ssh_host_ed25519_key\nUseDNS no\nPasswordAuthentication no\n' \
    > "$R/etc/ssh/sshd_config.d/ratelimit-box.conf"

# ---- off: what costs CPU under software emulation and is not wanted in the lab.
# nginx and prometheus are started by the lab's provisioners, not at boot.
for unit in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer \
            e2scrub_reap.service prometheus.service nginx.service; do
    chr systemctl disable "$unit" >/dev/null 2>&1 || true
done
for unit in systemd-timesyncd.service systemd-logind.service getty@tty1.service; do
    chr systemctl mask "$unit" >/dev/null 2>&1 || true
done

# ---- Python: a venv with ratelimit's dependencies and ratelimit from the checkout;
# pip told to use only the wheelhouse in the image (no index: the VMs have no internet)
mkdir -p "$R/opt/ratelimit-wheels"
cp "$WHEELS"/*.whl "$R/opt/ratelimit-wheels/"
printf '[global]\nno-index = true\nfind-links = /opt/ratelimit-wheels\ndisable-pip-version-check = true\n' \
    > "$R/etc/pip.conf"
chr python3 -m venv /opt/ratelimit
# every wheel in the wheelhouse: exactly what build.sh downloaded for setup.py's requirements
chr sh -c '/opt/ratelimit/bin/pip install -q /opt/ratelimit-wheels/*.whl'
mkdir "$R/tmp/ratelimit-src"
tar -C "$R/tmp/ratelimit-src" -xf "$SOURCE_TAR"
src_hash "$R/tmp/ratelimit-src" > "$R/opt/ratelimit/ratelimit-src.sha256"
chr /opt/ratelimit/bin/pip install -q --no-deps --no-build-isolation /tmp/ratelimit-src
rm -rf "$R/tmp/ratelimit-src"
ln -sf /opt/ratelimit/bin/ratelimit "$R/usr/local/bin/ratelimit"
chr /opt/ratelimit/bin/ratelimit --help >/dev/null

# ---- a small initramfs: only what a virtio disk with ext4 needs
printf 'MODULES=list\nCOMPRESS=gzip\n' > "$R/etc/initramfs-tools/conf.d/ratelimit-box"
printf 'virtio_pci\nvirtio_blk\nvirtio_scsi\nsd_mod\next4\ncrc32c_generic\n' >> "$R/etc/initramfs-tools/modules"
chr update-initramfs -u -k all >/dev/null 2>&1

# the traffic-control modules ratelimit uses, loaded at boot (tc would load them too)
printf 'sch_htb\nsch_netem\nsch_ingress\ncls_u32\nact_police\nact_mirred\nifb\n' \
    > "$R/etc/modules-load.d/ratelimit-tc.conf"

# ---- trim, and make every VM its own machine
# Not "$R"/tmp/*: mmdebstrap keeps its apt configuration there (APT_CONFIG) until its own
# cleanup, which runs `apt-get update` with no sources to empty the new system's package
# lists; without that file apt works on the HOST's /var/lib/apt/lists and empties those.
rm -rf "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* \
       "$R"/var/log/*.log "$R"/root/.cache
: > "$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
# no resolver: nothing to resolve without internet; the lab's names come from /etc/hosts
rm -f "$R/etc/resolv.conf"
echo 'nameserver 127.0.0.1' > "$R/etc/resolv.conf"
