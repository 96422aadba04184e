#!/usr/bin/env bash
# The system packages `tacc testbed` needs, from Debian: clang (compiles the eBPF programs into
# the build) and libbpf's headers, bpftool (the kernel's types for the BPF DCTCP at build time;
# registers it at run time), iproute2 (ip, tc, nstat), ethtool (offloads off on the veths),
# ping (base RTT), tcpdump (captures), tshark (the test suite reads captures with it) and Open
# vSwitch (the switches of the mechanisms with an SDN controller; only its tools are used, the
# system service is never started); qemu, busybox-static and cpio for the deploy tests' real
# guests (tools/guest-image.sh builds them, with Debian's kernel package). Installed when
# missing and run as root; otherwise the missing ones are named and the build goes on (the
# simulator needs none of them; the testbed then says what it lacks and exits 2).
set -euo pipefail
missing=()
have() { command -v "$1" >/dev/null 2>&1; }
have clang || missing+=(clang)
[ -e /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
have bpftool || missing+=(bpftool)
have tc && have nstat || missing+=(iproute2)
have ethtool || missing+=(ethtool)
have ping || missing+=(iputils-ping)
have tcpdump || missing+=(tcpdump)
have tshark || missing+=(tshark)
have ovs-vswitchd || missing+=(openvswitch-switch)
have qemu-system-x86_64 || missing+=(qemu-system-x86)
dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q "ok installed" ||
    missing+=(busybox-static)
have cpio || missing+=(cpio)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! have apt-get; then
    echo "note: the testbed needs these packages: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
# No service is started by the packages' scripts (policy-rc.d 101): the testbed starts its
# own OVS daemons in its run directory.
policy=/usr/sbin/policy-rc.d
[ -e "$policy" ] && policy=
[ -n "$policy" ] && printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
trap '[ -n "$policy" ] && rm -f "$policy"' EXIT
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
