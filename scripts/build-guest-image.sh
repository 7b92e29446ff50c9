#!/usr/bin/env bash
# Builds demo-guest.img: Debian's kernel + a busybox initramfs on a FAT superfloppy that boots under BIOS (syslinux)
# and UEFI (systemd-boot), for tests and the demo.
# Usage: scripts/build-guest-image.sh [OUTDIR]   (default _output/guest). Needs: apt-get (with package lists),
# dpkg-deb, kmod (modinfo), cpio, gzip, dosfstools (mkfs.vfat), mtools (mcopy, mmd), syslinux. No host installs, no mounts.
set -euo pipefail

OUT=${1:-_output/guest}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$OUT/work
DEBS=$WORK/debs
IMAGE=$OUT/demo-guest.img
start=$(date +%s)

for tool in apt-get apt-cache dpkg dpkg-deb modinfo cpio gzip mkfs.vfat mcopy syslinux; do
  command -v "$tool" >/dev/null || { echo "build-guest-image: missing host tool $tool (run scripts/setup-host.sh)" >&2; exit 1; }
done

# linux-image-amd64 is a metapackage; the kernel lives in the versioned package it depends on.
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p') || true
KPKG=${KPKG%%$'\n'*}
if [ -z "$KPKG" ]; then
  echo "build-guest-image: cannot resolve linux-image-amd64 (run apt-get update)" >&2
  exit 1
fi
KVER=${KPKG#linux-image-}

# Cached .debs make re-runs fast; a newer build of a package replaces its cached .deb.
mkdir -p "$DEBS"
sandbox=()
# apt's _apt sandbox user cannot write into root-owned work dirs; downloading as root avoids its warning.
if [ "$(id -u)" = 0 ]; then sandbox=(-o APT::Sandbox::User=root); fi
ARCH=$(dpkg --print-architecture)
SELECTED=()
# The guest agent and the ssh server come as Debian builds; their shared libraries come from the same archive (the
# recursive Depends of both), so the guest never borrows a library from the build host.
USERLAND=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
  --no-enhances --no-pre-depends qemu-guest-agent dropbear-bin 2>/dev/null | grep -v '^ ' | grep -v '^<' | sort -u)
[ -n "$USERLAND" ] || { echo "build-guest-image: cannot resolve qemu-guest-agent (run apt-get update)" >&2; exit 1; }
# dhcpcd-base: busybox has no DHCPv6 client (no udhcpc6 in Debian's build); dhcpcd takes a masquerade guest's
# IPv6 address by DHCPv6 and its default route from the launcher's router advertisements. Its libraries (libc,
# libudev) are already among the guest agent's.
# openssh-sftp-server: dropbear hands the sftp subsystem to /usr/lib/sftp-server, which is what `scp` (SFTP by
# default since OpenSSH 9) and `virtctl scp` talk to. It needs only libc.
for pkg in "$KPKG" busybox-static dhcpcd-base openssh-sftp-server $USERLAND; do
  version=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
  [ -n "$version" ] && [ "$version" != "(none)" ] || { echo "build-guest-image: no candidate for $pkg" >&2; exit 1; }
  deb=$DEBS/${pkg}_${version//:/%3a}_$ARCH.deb
  if [ ! -f "$deb" ]; then
    rm -f "$DEBS/${pkg}"_[0-9]*.deb  # superseded versions
    (cd "$DEBS" && apt-get download -q "${sandbox[@]}" "$pkg=$version" >/dev/null)
  fi
  [ -f "$deb" ] || { echo "build-guest-image: apt-get download did not produce $deb" >&2; exit 1; }
  SELECTED+=("$deb")
done

ROOT=$WORK/root
rm -rf "$ROOT"
mkdir -p "$ROOT"
for deb in "${SELECTED[@]}"; do
  dpkg-deb -x "$deb" "$ROOT"
done
KERNEL=$ROOT/boot/vmlinuz-$KVER
MODDIR=$ROOT/lib/modules/$KVER
BUSYBOX=$ROOT/bin/busybox
[ -f "$KERNEL" ] && [ -d "$MODDIR" ] && [ -x "$BUSYBOX" ] || { echo "build-guest-image: unexpected package layout" >&2; exit 1; }

# ---- initramfs tree ----
INITRD_DIR=$WORK/initramfs
rm -rf "$INITRD_DIR"
mkdir -p "$INITRD_DIR"/{bin,sbin,usr/bin,usr/sbin,usr/local/sbin,etc/acpi/PWRF,proc,sys,dev,run,tmp,mnt,root,lib/modules}
cp "$BUSYBOX" "$INITRD_DIR/bin/busybox"
# Applet links are made at build time so /init can start with a complete PATH.
while read -r applet; do
  [ "$applet" = bin/busybox ] && continue
  [ -e "$INITRD_DIR/$applet" ] || ln -s /bin/busybox "$INITRD_DIR/$applet"
done < <("$BUSYBOX" --list-full)

# qemu-ga and dropbear with their ldd closure, resolved by the archive's own loader against the extracted libraries.
LIBDIR=lib/x86_64-linux-gnu
LOADER=$ROOT/$LIBDIR/ld-linux-x86-64.so.2
[ -f "$LOADER" ] || { echo "build-guest-image: no loader in libc6" >&2; exit 1; }
mkdir -p "$INITRD_DIR/$LIBDIR" "$INITRD_DIR/lib64"
cp "$LOADER" "$INITRD_DIR/$LIBDIR/"
ln -sf "/$LIBDIR/ld-linux-x86-64.so.2" "$INITRD_DIR/lib64/ld-linux-x86-64.so.2"
for bin in usr/sbin/qemu-ga usr/sbin/dropbear usr/bin/dropbearkey usr/sbin/dhcpcd usr/lib/openssh/sftp-server; do
  [ -x "$ROOT/$bin" ] || { echo "build-guest-image: $bin missing from its package" >&2; exit 1; }
  mkdir -p "$(dirname "$INITRD_DIR/$bin")"
  cp "$ROOT/$bin" "$INITRD_DIR/$bin"
  while read -r soname _ path _; do
    case $soname in /*) continue ;; esac  # the loader itself, copied above
    case $path in
      "$ROOT"/*) cp -L "$path" "$INITRD_DIR/$LIBDIR/$soname" ;;
      *) echo "build-guest-image: $bin needs $soname from outside the guest's packages ($path)" >&2; exit 1 ;;
    esac
  done < <("$LOADER" --library-path "$ROOT/$LIBDIR:$ROOT/usr/$LIBDIR" --list "$ROOT/$bin" | grep '=>')
done
ln -s openssh/sftp-server "$INITRD_DIR/usr/lib/sftp-server"

# Module name (dashes and underscores are the same to the kernel) -> path of its .ko under $MODDIR.
declare -A KO
while IFS= read -r rel; do
  name=${rel##*/}
  name=${name%.ko}
  KO[${name//-/_}]=kernel/$rel
done < <(find "$MODDIR/kernel" -name '*.ko' -printf '%P\n')
if ((${#KO[@]} == 0)); then
  echo "build-guest-image: no uncompressed .ko modules in $MODDIR (compressed modules are not handled)" >&2
  exit 1
fi

# Wanted modules in load order; each one's dependencies are loaded before it (depth-first on `modinfo -F depends`).
WANTED=(
  virtio_pci virtio_blk virtio_net virtio_console virtio_scsi
  ahci sd_mod sr_mod isofs
  nls_cp437 nls_ascii nls_utf8 vfat
  button evdev pvpanic_pci pvpanic_mmio
  virtio_rng i6300esb virtio_mem
)
declare -A SEEN
ORDER=()
add_module() {
  local name=${1//-/_} dep
  [ -n "${SEEN[$name]:-}" ] && return 0
  SEEN[$name]=1
  if [ -z "${KO[$name]:-}" ]; then
    # Not a module file: built into this kernel (modules.builtin) or absent; either way nothing to load.
    return 0
  fi
  local deps
  deps=$(modinfo -F depends "$MODDIR/${KO[$name]}")
  for dep in ${deps//,/ }; do add_module "$dep"; done
  ORDER+=("$name")
}
for m in "${WANTED[@]}"; do add_module "$m"; done
: >"$INITRD_DIR/etc/modules.load"
for name in "${ORDER[@]}"; do
  cp "$MODDIR/${KO[$name]}" "$INITRD_DIR/lib/modules/$name.ko"
  echo "$name" >>"$INITRD_DIR/etc/modules.load"
done

cat >"$INITRD_DIR/etc/acpi/PWRF/00000080" <<'EOF'
#!/bin/sh
# Run by busybox acpid on the ACPI power button (QMP system_powerdown, libvirt shutdown).
echo "pykubevirt-guest: power button, powering off" >/dev/console
exec /bin/busybox poweroff -f
EOF

cat >"$INITRD_DIR/usr/local/sbin/crash" <<'EOF'
#!/bin/sh
# Test hook: a kernel panic; with panic=-1 the kernel resets at once (QEMU -no-reboot exits, pvpanic reports it).
echo 1 >/proc/sys/kernel/sysrq
echo "pykubevirt-guest: crashing" >/dev/console
echo c >/proc/sysrq-trigger
EOF

mkdir -p "$INITRD_DIR/etc/udhcpc" "$INITRD_DIR/www"
cat >"$INITRD_DIR/etc/udhcpc/default.script" <<'EOF'
#!/bin/sh
# busybox udhcpc's hook: the lease's address, default route and MTU on the NIC (KubeVirt's masquerade DHCP gives
# 10.0.2.2/24 via 10.0.2.1), announced on the console so tests and users see the guest's address.
# Only IPv4 addresses are flushed: the NIC's IPv6 ones are dhcpcd's.
case "$1" in
  deconfig) ip -4 addr flush dev "$interface"; ip link set "$interface" up ;;
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
    [ -n "$router" ] && ip route replace default via "${router%% *}" dev "$interface"
    echo "pykubevirt-guest: $interface $ip" >/dev/console ;;
esac
exit 0
EOF

# dhcpcd, IPv6 only: the address by DHCPv6 (KubeVirt's masquerade gives fd10:0:2::2, with rapid commit), routes
# from router advertisements; it adds them itself and the hook only announces the address on the console. With no
# `dhcpcd` account it runs without privilege separation (it says so on its stderr), which a one-user guest can.
cat >"$INITRD_DIR/etc/dhcpcd.conf" <<'EOF'
ipv6only
option rapid_commit
noipv6rs_delay
EOF
cat >"$INITRD_DIR/etc/dhcpcd.sh" <<'EOF'
#!/bin/sh
case "$reason" in
  BOUND6|REBOOT6|RENEW6|REBIND6)
    [ -n "$new_dhcp6_ia_na1_ia_addr1" ] && echo "pykubevirt-guest: $interface IPv6 $new_dhcp6_ia_na1_ia_addr1" >/dev/console ;;
esac
exit 0
EOF
mkdir -p "$INITRD_DIR/var/lib/dhcpcd"

# Accounts for dropbear and qemu-ga (getpwnam); '*' is a locked password, as dropbear refuses an empty one.
mkdir -p "$INITRD_DIR/etc/dropbear" "$INITRD_DIR/var"
ln -s ../run "$INITRD_DIR/var/run"
echo 'root:*:0:0:root:/root:/bin/sh' >"$INITRD_DIR/etc/passwd"
echo 'root:x:0:' >"$INITRD_DIR/etc/group"
echo /bin/sh >"$INITRD_DIR/etc/shells"
# What qemu-ga's guest-get-osinfo reports (status.guestOSInfo, virtctl guestosinfo).
cat >"$INITRD_DIR/etc/os-release" <<'EOF'
NAME="pykubevirt guest"
ID=pykubevirt-guest
VERSION_ID=1
VERSION="1 (busybox)"
PRETTY_NAME="pykubevirt demo guest 1 (busybox)"
EOF

# qemu-ga's guest-shutdown runs /sbin/shutdown -h -P|-H|-r +0 MESSAGE; PID 1 owns power, so this only signals it.
rm -f "$INITRD_DIR/sbin/shutdown"
cat >"$INITRD_DIR/sbin/shutdown" <<'EOF'
#!/bin/sh
signal=USR2
for arg; do
  case $arg in
    -r) signal=TERM ;;
    -H) signal=USR1 ;;
  esac
done
kill -$signal 1
EOF

cat >"$INITRD_DIR/usr/local/sbin/start-guest-agent" <<'EOF'
#!/bin/sh
# qemu-ga on the virtio-serial port named org.qemu.guest_agent.0 (udev's /dev/virtio-ports link, made by hand).
# The port appears shortly after virtio_console probes; a domain without the channel has none, and no agent runs.
i=0
while [ $i -lt 100 ]; do
  for port in /sys/class/virtio-ports/*; do
    [ "$(cat "$port/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] || continue
    mkdir -p /dev/virtio-ports
    ln -sf "/dev/${port##*/}" /dev/virtio-ports/org.qemu.guest_agent.0
    echo "pykubevirt-guest: guest agent on ${port##*/}" >/dev/console
    exec qemu-ga -m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0 -l /run/qemu-ga.log </dev/null
  done
  usleep 50000
  i=$((i + 1))
done
EOF

cat >"$INITRD_DIR/etc/profile" <<'EOF'
export PATH=/usr/local/sbin:/sbin:/bin:/usr/sbin:/usr/bin HOME=/root
PS1='\h:\w# '
EOF

cat >"$INITRD_DIR/init" <<'EOF'
#!/bin/sh
# pykubevirt test guest: boot marker, ACPI power button, a tiny cloud-init (NoCloud / ConfigDrive), serial shell.
export PATH=/usr/local/sbin:/sbin:/bin:/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The initramfs may lack /dev/console (non-root build), so bind the standard streams once devtmpfs is up.
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mkdir -p /run/cloud-init
: >/run/cloud-init/ssh-keys
: >/run/utmp

say() { echo "pykubevirt-guest: $*"; }

# Memory a virtio-mem device plugs comes online by itself (distributions do this with a udev rule; there is no udev).
echo online >/sys/devices/system/memory/auto_online_blocks 2>/dev/null

# busybox poweroff/halt/reboot without -f signal PID 1 (the shell runs applets before PATH, so no wrapper can
# intercept them); there is no init daemon, so PID 1 acts on the signals itself.
power() { say "$1"; sync; /bin/busybox "$1" -f; }
trap 'power poweroff' USR2
trap 'power halt' USR1
trap 'power reboot' TERM

while read -r mod; do
  args=
  # Synchronous SCSI scanning: sata/scsi disks exist once insmod returns, so the cloud-init scan needs no polling.
  [ "$mod" = scsi_mod ] && args=scan=sync
  insmod "/lib/modules/$mod.ko" $args 2>/dev/null || say "insmod $mod failed"
done </etc/modules.load

start-guest-agent >/dev/null 2>&1 &

# Every NIC asks for DHCP in the background (udhcpc retries until the launcher's server answers), and dhcpcd for
# DHCPv6 (it waits quietly where no router advertises), so boot never waits.
ip link set lo up
for nic in /sys/class/net/eth*; do
  [ -e "$nic" ] || continue
  ip link set "${nic##*/}" up
  udhcpc -f -i "${nic##*/}" -t 0 -T 1 -A 1 -S >/dev/null 2>&1 </dev/null &
  echo $! >"/run/udhcpc.${nic##*/}.pid"
  dhcpcd -6 -B -q -f /etc/dhcpcd.conf -c /etc/dhcpcd.sh "${nic##*/}" >/dev/null 2>&1 </dev/null &
done

# button + evdev expose the power button as /dev/input/event*; acpid runs /etc/acpi/PWRF/00000080 for it.
acpid -f -c /etc/acpi -l /run/acpid.log &
acpid_pid=$!
# "booted" promises a working power button, so wait (up to 2 s) until acpid holds the input event devices.
i=0
while [ $i -lt 20 ] && ! ls -l "/proc/$acpid_pid/fd" 2>/dev/null | grep -q /dev/input/event; do
  usleep 100000
  i=$((i + 1))
done

say booted

# Prints the ISO9660 volume id of a block device, or fails if it carries no ISO9660 filesystem.
iso_label() {
  [ "$(dd if="$1" bs=1 skip=32769 count=5 2>/dev/null)" = CD001 ] || return 1
  dd if="$1" bs=1 skip=32808 count=32 2>/dev/null | tr -d ' \000'
}

# A JSON string value ("key": "v") or a YAML scalar (key: v) from a metadata file.
meta_value() {
  v=$(sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$1" | head -n 1)
  [ -n "$v" ] || v=$(sed -n "s/^$2:[[:space:]]*//p" "$1" | head -n 1 | sed -e "s/^[\"']//" -e "s/[\"'][[:space:]]*\$//" -e 's/[[:space:]]*$//')
  echo "$v"
}

find_cloud_init() {
  for sys in /sys/class/block/*; do
    dev=${sys##*/}
    case $dev in sr*|vd*|sd*) ;; *) continue ;; esac
    [ -e "$sys/partition" ] && continue
    label=$(iso_label "/dev/$dev") || continue
    case $label in
      cidata|CIDATA|config-2|CONFIG-2) echo "$dev $label"; return 0 ;;
    esac
  done
  return 1
}

# network-config v2's static addresses, one "NIC ADDRESS/PREFIX" line each (ethernets.<nic>.addresses, as a
# block or a flow list): how a NIC on a network without IPAM is configured, as KubeVirt's networkData does.
parse_network_config() {
  awk '
    BEGIN { eth = -1; nicind = -1 }
    /^[ \t]*(#|$)/ { next }
    { match($0, /^ */); ind = RLENGTH; line = substr($0, ind + 1); sub(/[ \t]+$/, "", line) }
    eth >= 0 && ind <= eth { eth = -1; inaddr = 0 }
    line == "ethernets:" { eth = ind; nicind = -1; next }
    eth < 0 { next }
    inaddr && ind > addrind && line ~ /^- / { a = substr(line, 3); gsub(/["\047]/, "", a); print nic, a; next }
    { inaddr = 0 }
    (nicind < 0 || ind <= nicind) && line ~ /^[^ :]+:$/ { nic = substr(line, 1, length(line) - 1); nicind = ind; next }
    line ~ /^addresses:/ {
      v = line; sub(/^addresses:[ \t]*/, "", v)
      if (v ~ /^\[/) { gsub(/[][" \047]/, "", v); n = split(v, parts, ","); for (i = 1; i <= n; i++) if (parts[i] != "") print nic, parts[i] }
      else { inaddr = 1; addrind = ind }
    }
  ' "$1"
}

# The #cloud-config subset: top-level hostname, ssh_authorized_keys (block list, root's), and single-line runcmd
# items (strings or [flow, lists]).
parse_cloud_config() {
  awk -v q="'" '
    function unquote(s,  a, z) {
      a = substr(s, 1, 1); z = substr(s, length(s), 1)
      if (length(s) >= 2 && a == "\"" && z == "\"") { s = substr(s, 2, length(s) - 2); gsub(/\\"/, "\"", s) }
      else if (length(s) >= 2 && a == q && z == q) { s = substr(s, 2, length(s) - 2); gsub(q q, q, s) }
      return s
    }
    /^[ \t]*#/ || /^[ \t]*$/ { next }
    /^[^ \t-]/ {
      inrun = ($0 ~ /^runcmd:[ \t]*$/)
      inkeys = ($0 ~ /^ssh_authorized_keys:[ \t]*$/)
      if ($0 ~ /^hostname:/) { v = $0; sub(/^hostname:[ \t]*/, "", v); sub(/[ \t]+$/, "", v); print "hostname " unquote(v) }
      next
    }
    inkeys && /^[ \t]*-[ \t]/ {
      item = $0; sub(/^[ \t]*-[ \t]+/, "", item); sub(/[ \t]+$/, "", item)
      print "sshkey " unquote(item); next
    }
    inrun && /^[ \t]*-[ \t]/ {
      item = $0; sub(/^[ \t]*-[ \t]+/, "", item); sub(/[ \t]+$/, "", item)
      if (item ~ /^\[.*\]$/) {
        n = split(substr(item, 2, length(item) - 2), parts, /,[ \t]*/); item = ""
        # A list is an argv (cloud-init runs it without a shell), so each element is single-quoted for sh -c.
        for (i = 1; i <= n; i++) {
          part = parts[i]; sub(/^[ \t]+/, "", part); sub(/[ \t]+$/, "", part)
          part = unquote(part); gsub(q, q "\\" q q, part)
          item = item (i > 1 ? " " : "") q part q
        }
      } else item = unquote(item)
      print "runcmd " item
    }
  ' "$1"
}

hostname_from=
user_data=
ci=$(find_cloud_init) || ci=
if [ -n "$ci" ]; then
  dev=${ci%% *}
  label=${ci#* }
  mkdir -p /mnt/cloud-init
  if mount -t iso9660 -o ro "/dev/$dev" /mnt/cloud-init; then
    case $label in
      cidata|CIDATA)
        say "cloud-init NoCloud on $dev"
        meta=/mnt/cloud-init/meta-data; user_data=/mnt/cloud-init/user-data; key=local-hostname
        [ -f /mnt/cloud-init/network-config ] && cp /mnt/cloud-init/network-config /run/cloud-init/network-config ;;
      *)
        say "cloud-init ConfigDrive on $dev"
        meta=/mnt/cloud-init/openstack/latest/meta_data.json; user_data=/mnt/cloud-init/openstack/latest/user_data
        key=hostname ;;
    esac
    [ -f "$meta" ] && hostname_from=$(meta_value "$meta" "$key")
    # accessCredentials propagated by noCloud/configDrive: {"public-keys"|"public_keys": {"0": "ssh-… …", …}}.
    [ -f "$meta" ] && sed -n 's/.*"public[-_]keys":{\([^}]*\)}.*/\1/p' "$meta" | sed 's/","/"\n"/g' |
      sed -n 's/^"[^"]*":"\(.*\)"$/\1/p' >>/run/cloud-init/ssh-keys
    if [ -f "$user_data" ]; then cp "$user_data" /run/cloud-init/user-data; user_data=/run/cloud-init/user-data; else user_data=; fi
    umount /mnt/cloud-init
  else
    say "cannot mount cloud-init disk $dev"
  fi
else
  say "no cloud-init disk"
fi

: >/run/cloud-init/runcmd
if [ -n "$user_data" ]; then
  case $(head -n 1 "$user_data") in
    '#cloud-config'*)
      parse_cloud_config "$user_data" >/run/cloud-init/parsed
      h=$(sed -n 's/^hostname //p' /run/cloud-init/parsed | tail -n 1)
      [ -n "$h" ] && hostname_from=$h
      sed -n 's/^runcmd //p' /run/cloud-init/parsed >/run/cloud-init/runcmd
      sed -n 's/^sshkey //p' /run/cloud-init/parsed >>/run/cloud-init/ssh-keys ;;
    '#!'*) echo "sh $user_data" >/run/cloud-init/runcmd ;;
    *) say "user-data format not handled" ;;
  esac
fi
if [ -n "$hostname_from" ]; then
  hostname "$hostname_from" && echo "$hostname_from" >/etc/hostname
  say "hostname $hostname_from"
fi
# dropbear on port 22 for root, public keys only: cloud-init's keys now, the guest agent's (accessCredentials) later.
mkdir -p /root/.ssh
chmod 700 /root /root/.ssh
if [ -s /run/cloud-init/ssh-keys ]; then
  cat /run/cloud-init/ssh-keys >>/root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
  say "ssh keys $(wc -l </run/cloud-init/ssh-keys)"
fi
# The host key is made per boot, in the background: under TCG it costs a second that "ready" need not wait for.
(
  dropbearkey -t ed25519 -f /etc/dropbear/dropbear_ed25519_host_key >/dev/null 2>&1
  dropbear -s -r /etc/dropbear/dropbear_ed25519_host_key -p 22 || say "dropbear failed"
) &
if [ -f /run/cloud-init/network-config ]; then
  parse_network_config /run/cloud-init/network-config | while read -r nic address; do
    # A static address replaces DHCP on its NIC (udhcpc would flush it at its next deconfig).
    [ -f "/run/udhcpc.$nic.pid" ] && kill "$(cat "/run/udhcpc.$nic.pid")" 2>/dev/null
    ip link set "$nic" up && ip addr add "$address" dev "$nic" && say "network-config $nic $address"
  done
fi
# busybox httpd on port 80 with a page naming the guest: what a host reaches through the pod IP.
echo "pykubevirt-guest $(hostname)" >/www/index.html
httpd -p 80 -h /www
while IFS= read -r cmd; do
  case $cmd in
    poweroff) power poweroff ;;
    *) sh -c "$cmd" </dev/null ;;
  esac
done </run/cloud-init/runcmd

say ready

# The serial console: a job-control shell on the real console device, restarted whenever it exits.
(while :; do setsid cttyhack sh -l; sleep 1; done) &
# PID 1 must never exit; waiting (rather than sleeping) lets the traps above run as soon as a signal arrives.
while :; do wait; sleep 1; done
EOF
chmod 0755 "$INITRD_DIR/init" "$INITRD_DIR/etc/acpi/PWRF/00000080" "$INITRD_DIR"/usr/local/sbin/* "$INITRD_DIR/sbin/shutdown" \
  "$INITRD_DIR/etc/udhcpc/default.script" "$INITRD_DIR/etc/dhcpcd.sh"
if [ "$(id -u)" = 0 ]; then mknod -m 600 "$INITRD_DIR/dev/console" c 5 1; fi

INITRD=$WORK/initrd.gz
(cd "$INITRD_DIR" && find . -print0 | LC_ALL=C sort -z |
  cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) | gzip -9 -n >"$INITRD"

# ---- EFI: systemd-boot as the removable-media loader, booting the same kernel, initrd and command line ----
# OVMF finds \EFI\BOOT\BOOTX64.EFI on the FAT filesystem; the loader is unsigned, so under Secure Boot OVMF refuses it
# ("Access Denied"), which is what the Secure Boot test shows.
install_efi_loader() {
  local img=$1 pkg=systemd-boot-efi version deb
  version=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
  [ -n "$version" ] && [ "$version" != "(none)" ] || { echo "build-guest-image: no candidate for $pkg" >&2; exit 1; }
  deb=$DEBS/${pkg}_${version//:/%3a}_$ARCH.deb
  if [ ! -f "$deb" ]; then
    rm -f "$DEBS/${pkg}"_[0-9]*.deb
    (cd "$DEBS" && apt-get download -q "${sandbox[@]}" "$pkg=$version" >/dev/null)
  fi
  rm -rf "$WORK/efi"
  dpkg-deb -x "$deb" "$WORK/efi"
  printf 'timeout 0\ndefault pykubevirt.conf\n' >"$WORK/efi/loader.conf"
  # The kernel command line is syslinux's APPEND, so both firmwares boot the guest the same way.
  printf 'title pykubevirt demo guest\nlinux /vmlinuz\ninitrd /initrd.gz\noptions %s\n' \
    "$(sed -n 's/^ *APPEND //p' "$WORK/syslinux.cfg")" >"$WORK/efi/entry.conf"
  mmd -i "$img" ::EFI ::EFI/BOOT ::loader ::loader/entries
  mcopy -i "$img" "$WORK/efi/usr/lib/systemd/boot/efi/systemd-bootx64.efi" ::EFI/BOOT/BOOTX64.EFI
  mcopy -i "$img" "$WORK/efi/loader.conf" ::loader/loader.conf
  mcopy -i "$img" "$WORK/efi/entry.conf" ::loader/entries/pykubevirt.conf
}

# ---- FAT superfloppy with syslinux ----
# no_timer_check: under TCG on loaded cores the kernel's IO-APIC timer check can miss its ticks and panic
# ("IO-APIC + timer doesn't work!"); virtual machines' kernels skip it, as cloud images do.
cat >"$WORK/syslinux.cfg" <<'EOF'
SERIAL 0 115200
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL vmlinuz
  INITRD initrd.gz
  APPEND console=ttyS0 panic=-1 quiet no_timer_check
EOF
cp "$KERNEL" "$WORK/vmlinuz"
payload_kib=$((($(stat -c %s "$KERNEL") + $(stat -c %s "$INITRD")) / 1024))
# Whole MiB with ~2 MiB headroom for FAT tables, ldlinux and the config.
size_kib=$(((payload_kib / 1024 + 3) * 1024))
tmp_img=$IMAGE.tmp
rm -f "$tmp_img"
mkfs.vfat -C -n PYKVGUEST "$tmp_img" "$size_kib" >/dev/null
mcopy -i "$tmp_img" "$WORK/vmlinuz" "$INITRD" "$WORK/syslinux.cfg" ::
install_efi_loader "$tmp_img"
syslinux --install "$tmp_img"
mv -f "$tmp_img" "$IMAGE"
rm -rf "$ROOT"

echo "build-guest-image: kernel $KVER, $((size_kib / 1024)) MiB, $(($(date +%s) - start)) s" >&2
echo "$IMAGE"
