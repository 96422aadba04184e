#!/usr/bin/env bash
# A guest for the deploy tests' real VMs, in OUT (default target/guest): Debian's kernel
# (vmlinuz) and an initramfs (initrd.gz) of busybox, the virtio NIC's modules, the guest's init
# (tools/guest/init) and its traffic program (tools/guest/traffic.c, built static here). The
# guest is booted once with a virtio NIC to check it: under KVM where KVM runs guests, else
# under TCG (qemu's emulation); `accel`, written last, says which, for the tests.
# Needs gcc, cpio, busybox-static, qemu-system-x86 and apt-get (the kernel's package is
# downloaded, not installed); where any is missing it says so and builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../target/guest}
have() { command -v "$1" >/dev/null 2>&1; }
for tool in gcc cpio qemu-system-x86_64 apt-get apt-cache dpkg-deb; do
    have "$tool" || { echo "note: no guest image: $tool is missing" >&2; exit 0; }
done
# Debian's busybox package installs a dynamic /bin/busybox, which an initramfs cannot run.
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
    echo "note: no guest image: /bin/busybox is not busybox-static's" >&2
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
package=$(apt-cache depends linux-image-amd64 2>/dev/null |
          awk '/Depends: linux-image-[0-9]/ {print $2; exit}' || true)
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
# The virtio NIC's modules, each after those it needs (under lib/ or usr/lib/, compressed or
# not); one the kernel has built in is not there and not needed.
builtin=$(find "$work/kernel" -path '*/modules/*' -name modules.builtin -exec cat {} + || true)
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover \
         net_failover virtio_net; do
    ko=$(find "$work/kernel" -path '*/modules/*' \( -name "$m.ko" -o -name "$m.ko.*" \) |
         head -n 1)
    if [ -z "$ko" ]; then
        grep -q "/$m.ko$" <<<"$builtin" ||
            { echo "note: the kernel of $package has no module $m and does not build it in" >&2; exit 1; }
        continue
    fi
    case "$ko" in
        *.ko) cp "$ko" "$root/modules/$m.ko" ;;
        *.ko.xz) xz -dc "$ko" > "$root/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$ko" > "$root/modules/$m.ko" ;;
        *.ko.gz) gzip -dc "$ko" > "$root/modules/$m.ko" ;;
        *) echo "note: $ko: a compression this script does not know" >&2; exit 1 ;;
    esac
    echo "$m"
done > "$root/modules/order"
cp "$(find "$work/kernel/boot" -name 'vmlinuz-*' | head -n 1)" "$work/vmlinuz"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

# One boot with a virtio NIC and no traffic: the guest says it is up with its address and
# powers off (in about 5 s under TCG here; a KVM that creates VMs but whose guests hang, as
# nested ones may, is given 20 s).
boots() {
    timeout "$2" qemu-system-x86_64 -accel "$1" -m 128 -smp 1 -nodefaults -display none \
        -no-reboot -kernel "$work/vmlinuz" -initrd "$work/initrd.gz" \
        -append "console=ttyS0 quiet panic=-1 tacc.addr=10.0.2.15/24" \
        -nic user,model=virtio-net-pci -serial "file:$work/console-$1" >/dev/null 2>&1 || true
    grep -q "tacc-guest: up 10.0.2.15/24" "$work/console-$1" 2>/dev/null &&
        ! grep -q "tacc-guest: no eth0\|insmod .* failed" "$work/console-$1"
}
if [ -w /dev/kvm ] && boots kvm 20; then
    accel=kvm
elif boots tcg 60; then
    accel=tcg
else
    echo "note: the guest image of $package did not boot with its NIC:" >&2
    cat "$work/console-tcg" >&2 || true
    exit 1
fi
mkdir -p "$out"
rm -f "$out/accel"
mv "$work/vmlinuz" "$work/initrd.gz" "$out/"
echo "$accel" > "$out/accel"
echo "guest image: $out ($package, $accel)"
