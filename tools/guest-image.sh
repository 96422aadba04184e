#!/usr/bin/env bash
# A guest for the deploy tests' real VMs, in OUT (default target/guest): Debian's kernel
# (vmlinuz) and an initramfs (initrd.gz) of busybox, the virtio NIC's modules, the guest's init
# (tools/guest/init) and its traffic program (tools/guest/traffic.c, built static here). The
# guest is booted once to check it: under KVM where KVM runs guests, else under TCG (qemu's
# emulation); `accel` says which, for the tests.
# Needs gcc, cpio, busybox-static, qemu-system-x86 and apt-get (the kernel's package is
# downloaded, not installed); where any is missing it says so and builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../target/guest}
have() { command -v "$1" >/dev/null 2>&1; }
for tool in gcc cpio qemu-system-x86_64 apt-get dpkg-deb; do
    have "$tool" || { echo "note: no guest image: $tool is missing" >&2; exit 0; }
done
[ -x /bin/busybox ] || { echo "note: no guest image: busybox-static is missing" >&2; exit 0; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
package=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$package" ] || { echo "note: no guest image: no linux-image-amd64 in apt's lists" >&2; exit 0; }
(cd "$work" && apt-get download -q "$package" >/dev/null 2>&1) ||
    { echo "note: no guest image: apt-get download $package failed" >&2; exit 0; }
dpkg-deb -x "$work"/*.deb "$work/kernel"

root=$work/initrd
mkdir -p "$root"/{bin,dev,proc,sys,modules}
cp /bin/busybox "$root/bin/busybox"
cp "$here/guest/init" "$root/init"
chmod 755 "$root/init"
gcc -O2 -static -Wall -Wextra -Werror -o "$root/bin/traffic" "$here/guest/traffic.c"
# The virtio NIC's modules, each after those it needs; a module the kernel has built in is
# not there and not needed.
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover \
         net_failover virtio_net; do
    ko=$(find "$work/kernel/lib/modules" -name "$m.ko" | head -n 1)
    [ -n "$ko" ] || continue
    cp "$ko" "$root/modules/"
    echo "$m"
done > "$root/modules/order"

mkdir -p "$out"
rm -f "$out/accel"
cp "$work"/kernel/boot/vmlinuz-* "$out/vmlinuz"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out/initrd.gz"

# One boot without a NIC or traffic: the guest says it is up and powers off (in about 5 s
# under TCG here; a KVM that creates VMs but whose guests hang, as nested ones may, is
# given 20 s).
boots() {
    timeout "$2" qemu-system-x86_64 -accel "$1" -m 128 -smp 1 -nodefaults -display none \
        -no-reboot -kernel "$out/vmlinuz" -initrd "$out/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1 tacc.addr=10.0.0.1/24" \
        -serial "file:$work/console-$1" >/dev/null 2>&1 || true
    grep -q "tacc-guest: up" "$work/console-$1" 2>/dev/null
}
if [ -w /dev/kvm ] && boots kvm 20; then
    echo kvm > "$out/accel"
elif boots tcg 60; then
    echo tcg > "$out/accel"
else
    echo "note: the guest image in $out did not boot:" >&2
    cat "$work/console-tcg" >&2 || true
    exit 1
fi
echo "guest image: $out ($package, $(cat "$out/accel"))"
