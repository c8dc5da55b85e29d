#!/usr/bin/env bash
# Runs a command on a Linux kernel that has the `tls` module (kTLS), when the machine's
# own kernel has none (this project's VMs: `tcp_available_ulp` lists only mptcp).
#
#   sudo bench/ktls-vm.sh 'EDGECACHE_TEST_KTLS=1 target/debug/deps/tls-<hash>'
#   sudo bench/ktls-vm.sh 'python3 bench/tls.py --ktls on --out /work/vmout'
#
# It downloads Debian's kernel package (linux-image-amd64) and busybox-static, builds a
# small initramfs that loads virtio, 9p, tls and the AES-NI/GCM crypto modules, and boots
# that kernel in QEMU with the host's root file system shared read-only over 9p (tmpfs
# on /tmp, /run, /root, /var/tmp, /var/log, /var/lib/nginx), so the command runs on the
# host's own binaries and tools, in the repository's directory, as root. OUT (default
# /work/vmout) is shared writable; the command's output is OUT/run.log. 2 vCPUs, 3 GiB.
#
# Acceleration: KVM when EDGECACHE_VM_ACCEL=kvm; the default is TCG (software
# emulation), because nested KVM in this project's Firecracker guests hangs a Linux
# guest at boot. Under TCG the kernel, the module and every syscall are real, so it
# shows that kTLS works and what it changes in the server's work (syscalls, copies,
# user-space CPU); its timings come from an emulated CPU (AES-NI included) and say
# little about real hardware.
set -euo pipefail
cmd=${1:?usage: ktls-vm.sh COMMAND}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/work/vmout}
work=${EDGECACHE_VM_DIR:-/tmp/edgecache-ktls-vm}
accel=${EDGECACHE_VM_ACCEL:-tcg}
[ "$(id -u)" -eq 0 ] || { echo "ktls-vm.sh: must run as root" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null && command -v cpio >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-system-x86 cpio >/dev/null
}
mkdir -p "$work" "$out"
cd "$work"
if [ ! -d kern ]; then
    # The newest versioned image the metapackage points at.
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    apt-get download "$pkg" busybox-static >/dev/null
    dpkg -x "$pkg"_*.deb kern
    dpkg -x busybox-static_*.deb bb
fi
kver=$(ls kern/lib/modules | head -1)
mods=kern/lib/modules/$kver/kernel
rm -rf initrd && mkdir -p initrd/{bin,proc,sys,dev,host,lib/modules}
cp bb/bin/busybox initrd/bin/
for m in drivers/virtio/virtio drivers/virtio/virtio_ring drivers/virtio/virtio_pci_legacy_dev \
         drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci net/9p/9pnet \
         net/9p/9pnet_virtio fs/fscache/fscache fs/netfs/netfs fs/9p/9p net/tls/tls \
         crypto/crypto_simd crypto/cryptd arch/x86/crypto/aesni-intel \
         arch/x86/crypto/ghash-clmulni-intel crypto/gcm; do
    cp "$mods/$m.ko" initrd/lib/modules/
done
cat > initrd/init <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
# Dependencies first: a few passes load them all whatever the order.
for pass in 1 2 3 4; do
  for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci 9pnet \\
           9pnet_virtio netfs fscache 9p tls cryptd crypto_simd aesni-intel ghash-clmulni-intel gcm; do
    grep -q "^\$(echo \$m | tr - _) " /proc/modules || insmod /lib/modules/\$m.ko 2>/dev/null
  done
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /host$out
for d in proc sys dev; do mount --bind /\$d /host/\$d; done
for d in tmp run var/tmp root var/log var/lib/nginx; do
  [ -d /host/\$d ] && mount -t tmpfs tmpfs /host/\$d
done
ip link set lo up
echo "kernel \$(uname -r), tcp_available_ulp: \$(cat /proc/sys/net/ipv4/tcp_available_ulp)"
chroot /host /bin/bash -c 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root; cd $repo; echo "kernel \$(uname -r), tcp_available_ulp: \$(cat /proc/sys/net/ipv4/tcp_available_ulp)"; $cmd; echo "exit \$?"; cat /proc/net/tls_stat' > /host$out/run.log 2>&1
sync
poweroff -f
EOF
chmod +x initrd/init
(cd initrd && find . | cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.gz)
if [ "$accel" = kvm ]; then
    accel_args=(-enable-kvm -cpu host,-arch-capabilities)
else
    accel_args=(-accel tcg,thread=multi -cpu max)
fi
qemu-system-x86_64 "${accel_args[@]}" -smp 2 -m 3072 -nographic -no-reboot \
    -kernel "kern/boot/vmlinuz-$kver" -initrd initrd.gz -append "console=ttyS0 quiet panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap \
    -virtfs local,path="$out",mount_tag=out,security_model=passthrough >"$work/console.log" 2>&1
cat "$out/run.log"
