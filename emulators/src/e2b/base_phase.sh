#!/bin/sh
# The base phase of E2B's template builder as the e2b emulator runs it: what
# provision.sh does for the debian family (ID debian or ubuntu, or one in ID_LIKE),
# written from e2b-dev/infra at the commit the Dockerfile names
# (packages/orchestrator/pkg/template/build/phases/base/provision.sh, distro/distro.go,
# distro/init.go), with two differences it says in the build log: it installs no
# missing package (the emulator builds offline), and it skips the init setup (systemd
# units of a VM; the emulated sandbox is a container with no init).
set -eu

echo "Starting provisioning script"
echo "Detecting base image distribution"
if [ -r /etc/os-release ]; then
    # shellcheck source=/dev/null
    . /etc/os-release
    distro_id="${ID:-unknown}"
    id_like="${ID_LIKE:-}"
else
    distro_id="unknown (image has no /etc/os-release)"
    id_like=""
fi
family=""
case "$distro_id" in
debian | ubuntu) family=debian ;;
rhel | ol | amzn)
    echo "[provision] ERROR: base image distribution ID='$distro_id' is not supported." >&2
    exit 1
    ;;
esac
if [ -z "$family" ]; then
    for like in $id_like; do
        case "$like" in
        debian | ubuntu)
            family=debian
            echo "[provision] WARNING: base image distribution ID='$distro_id' is not officially supported; provisioning it as '$like' from ID_LIKE. This is best effort and untested." >&2
            break
            ;;
        esac
    done
fi
if [ -z "$family" ]; then
    echo "emulate e2b: base image distribution ID='$distro_id': the emulator runs E2B's base phase for the debian family only (debian, ubuntu); E2B's builder also takes other families" >&2
    exit 1
fi
echo "Provisioning for distro '$distro_id' (init=/lib/systemd/systemd, timesync=chrony, admin-group=sudo)"
mkdir -p /usr/local/share/e2b
printf "E2B_DISTRO_ID='%s'\nE2B_INIT_SYSTEM='systemd'\nE2B_ADMIN_GROUP='sudo'\n" "$distro_id" >/usr/local/share/e2b/distro.env

packages="systemd systemd-sysv openssh-server sudo chrony socat curl ca-certificates fuse3 iptables git nfs-common less nftables iputils-ping jq iproute2"
echo "Checking presence of the following packages: $packages"
missing=""
for package in $packages; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        echo "Package $package is missing, will install it."
        missing="$missing $package"
    fi
done
if [ -n "$missing" ]; then
    echo "Missing packages detected, installing:$missing"
    echo "emulate e2b: not installed:$missing. E2B's builder installs them from the distribution's archive; the emulator builds offline, so this template lacks them where a live one has them"
else
    echo "All required packages are already installed."
fi

bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$bundle" ]; then
    echo "CA trust bundle missing at $bundle — running the profile's refresh"
    if command -v update-ca-certificates >/dev/null 2>&1; then
        update-ca-certificates
    else
        echo "emulate e2b: no update-ca-certificates (ca-certificates is not installed), so no CA bundle"
    fi
fi

mkdir -p /etc/tmpfiles.d
echo 'z /dev/fuse 0666 root root -' >/etc/tmpfiles.d/fuse.conf

echo "Setting up shell"
mkdir -p /etc/profile.d /root
echo "export SHELL='/bin/bash'" >/etc/profile.d/shell.sh
echo "export PS1='\w \$ '" >/etc/profile.d/prompt.sh
echo "export PS1='\w \$ '" >>/etc/profile
echo "export PS1='\w \$ '" >>/root/.bashrc
echo "Use .bashrc and .profile"
echo "if [ -f ~/.bashrc ]; then source ~/.bashrc; fi; if [ -f ~/.profile ]; then source ~/.profile; fi" >>/etc/profile

echo "Remove root password"
if [ -f /etc/passwd ]; then
    passwd -d root
else
    echo "No /etc/passwd on this image; skipping root password removal"
fi

echo "Setting up chrony"
mkdir -p /etc/chrony
printf 'include /run/chrony-e2b/source.conf\nmakestep 1.0 3\n' >/etc/chrony/chrony.conf
echo "include /etc/chrony/chrony.conf" >/etc/chrony.conf

echo "Setting up SSH"
mkdir -p /etc/ssh
printf 'PermitRootLogin yes\nPermitEmptyPasswords yes\nPasswordAuthentication yes\n' >>/etc/ssh/sshd_config

echo "Increasing inotify watch limit"
echo 'fs.inotify.max_user_watches=65536' >>/etc/sysctl.conf
echo "Disabling proactive memory compaction"
echo 'vm.compaction_proactiveness=0' >>/etc/sysctl.conf

echo "emulate e2b: skipped the init setup (masking and enabling a VM's systemd boot units, envd's among them); the emulated sandbox is a container with no init"

rm -rf /etc/machine-id
echo "Linking /lib/systemd/systemd to init"
mkdir -p /usr/sbin
ln -sf /lib/systemd/systemd /usr/sbin/init
[ -L /sbin ] || ln -sf /lib/systemd/systemd /sbin/init

echo "Finished provisioning script"
rm -rf /etc/init.d/rcS
rm -rf /usr/local/bin/provision.sh
