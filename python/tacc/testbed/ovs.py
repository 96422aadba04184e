"""Open vSwitch switches for the testbed: one OVS instance per switch namespace, with its
database, daemons, sockets and logs in the run's working directory (`ovs/sw<i>-*`), never the
machine's system instance.

The controller runs in a management namespace (`tacc-R-mgmt`) with a veth to every switch
namespace, a management network apart from the data path: switch i reaches the controller at
198.18.i.1 (the benchmarking range, which no scenario's VMs use) from 198.18.i.2 on its
interface `mgmt`, which is not a port of its bridge, over OpenFlow on TCP port 6653.

Each switch i is a bridge `sw<i>` with the userspace datapath (`datapath_type=netdev`: no kernel
module is needed), OpenFlow 1.3 only, datapath id i + 1, and the switch's ports, plan port p
as OpenFlow port p + 1. Fail mode `secure`: while the controller is away the switch keeps
its rules and forwards by them, and never falls back to learning-switch forwarding (which
would flood a routed fabric); new flows wait for the controller to come back. The
controller is reconnected to with a backoff of at most `MAX_BACKOFF_MS`.

The userspace datapath reads each port with a packet socket and sends every port's frames
through one more, and a frame in a port's qdisc is charged to that socket until the veth
takes it: at the kernel's default send buffer (212992 B, about 91 full frames of 2.3 kB
each in memory) the switch's ports together could hold 91 packets, and OVS dropped the rest
uncounted by the qdisc, whatever the scenario's buffer. Each vswitchd's packet sockets get
buffers the qdiscs' limits always bind first (`_open_buffers`).

Inspect a running switch with
`ovs-ofctl -O OpenFlow13 dump-flows unix:/tmp/tacc-testbed-R/ovs/sw<i>.mgmt`.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import time
from pathlib import Path

from tacc.testbed import TestbedError, TestbedUnavailable, shell

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tacc.testbed.topology import Topology

MAX_BACKOFF_MS = 1000
REVALIDATE_MS = 100  # the least OVS takes
CONTROLLER_PORT = 6653
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
# The send socket's buffer: as large as the kernel allows, so only the ports' qdiscs bound
# what waits. The receive sockets': 32 MiB, 1.7 s of frames at a 100 Mb/s port (2.3 kB of
# memory per 1500 B frame), for OVS to be descheduled without losing a frame.
SEND_BUFFER = 2**31 // 2 - 1
RECEIVE_BUFFER = 32 << 20
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SYS_PIDFD_GETFD = 438
# A frame no host takes (to a MAC no interface has, EtherType 0x88b5, local experimental)
# that makes a vswitchd open its send socket.
PRIMING_FRAME = "02746300ffff" "02746300fffe" "88b5" + "00" * 46
TOOLS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")


def missing() -> list[str]:
    """What this machine lacks to run OVS switches."""
    found = [f"{tool}: not found on PATH (apt install openvswitch-switch)"
             for tool in TOOLS if shutil.which(tool) is None]
    if not found and not SCHEMA.is_file():
        found.append(f"{SCHEMA}: missing (apt install openvswitch-common)")
    return found


def datapath_id(switch: int) -> int:
    return switch + 1


def ofport(port: int) -> int:
    return port + 1


def run_dir(workdir: Path) -> Path:
    return workdir / "ovs"


def controller_address(switch: int) -> str:
    """The controller as switch `switch` reaches it."""
    return f"198.18.{switch}.1"


class Switches:
    """The run's OVS instances, by switch index."""

    def __init__(self, topo: Topology, workdir: Path) -> None:
        self.topo, self.dir = topo, run_dir(workdir)

    def _file(self, switch: int, what: str) -> Path:
        return self.dir / f"sw{switch}-{what}"

    def mgmt(self, switch: int) -> str:
        """The bridge's management socket, for ovs-ofctl."""
        return f"unix:{self.dir / f'sw{switch}.mgmt'}"

    def _env(self) -> dict[str, str]:
        d = str(self.dir)
        return {**os.environ, "OVS_RUNDIR": d, "OVS_LOGDIR": d, "OVS_DBDIR": d,
                "OVS_SYSCONFDIR": d, "OVS_PKGDATADIR": str(SCHEMA.parent)}

    def _db(self, switch: int) -> str:
        return f"unix:{self._file(switch, 'db.sock')}"

    def management_network(self) -> None:
        """The management namespace and its link to every switch."""
        names = self.topo.names
        self.topo.add_namespace(names.mgmt)
        lines = ["link set lo up"]
        for switch in sorted(self.topo.switch_ports):
            if switch > 255:
                raise TestbedError("OVS switches: at most 256 on the management network")
            ns = names.switch(switch)
            shell.batch("ip", None, [f"link add name m{switch} netns {names.mgmt} type veth "
                                     f"peer name mgmt netns {ns}"])
            shell.batch("ip", ns, [f"addr add 198.18.{switch}.2/24 dev mgmt",
                                   "link set mgmt up"])
            lines += [f"addr add {controller_address(switch)}/24 dev m{switch}",
                      f"link set m{switch} up"]
        shell.batch("ip", names.mgmt, lines)

    def start(self) -> None:
        """Starts every switch's daemons and builds its bridge."""
        if problems := missing():
            raise TestbedUnavailable(problems)
        self.dir.mkdir(mode=0o700)
        for switch, ports in sorted(self.topo.switch_ports.items()):
            db = self._file(switch, "conf.db")
            shell.run(["ovsdb-tool", "create", str(db), str(SCHEMA)])
            ns = self.topo.names.switch(switch)
            shell.run(shell.in_ns(
                ns, "ovsdb-server", str(db), f"--remote=punix:{self._file(switch, 'db.sock')}",
                f"--pidfile={self._file(switch, 'ovsdb-server.pid')}",
                f"--unixctl={self._file(switch, 'ovsdb-server.ctl')}",
                f"--log-file={self._file(switch, 'ovsdb-server.log')}", "--detach",
                "--no-chdir"), env=self._env())
            # The rules' counters are the datapath flows', which a revalidator pushes up
            # every max-revalidator ms (500 by default): SDN-ECN's 0.5 s probes ranked flows
            # by rates up to 0.5 s old (measured: the fastest flow's counter short of 5 of
            # the 5.6 MB it sent in a probe interval, so the slower flow was marked again).
            self._start_vswitchd(switch)
            self._vsctl(switch, ["set", "Open_vSwitch", ".",
                                 f"other_config:max-revalidator={REVALIDATE_MS}"])
            bridge = f"sw{switch}"
            vsctl = [
                "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
                "fail_mode=secure", "protocols=OpenFlow13",
                f"other-config:datapath-id={datapath_id(switch):016x}",
                "other-config:disable-in-band=true",
            ]
            # linux-noop: OVS must leave the ports' qdiscs alone (by default it deletes
            # them), for they are the switch's queues.
            vsctl += ["--", "--id=@noop", "create", "qos", "type=linux-noop"]
            for port, dev in sorted(ports.items()):
                vsctl += ["--", "add-port", bridge, dev, "--", "set", "interface", dev,
                          f"ofport_request={ofport(port)}", "--", "set", "port", dev,
                          "qos=@noop"]
            self._vsctl(switch, vsctl)
            target = f"tcp:{controller_address(switch)}:{CONTROLLER_PORT}"
            self._vsctl(switch, ["set-controller", bridge, target, "--", "set", "controller",
                                 bridge, f"max_backoff={MAX_BACKOFF_MS}",
                                 "connection_mode=out-of-band"])
            self._open_buffers(switch)

    def _vsctl(self, switch: int, args: list[str]) -> str:
        return shell.run(["ovs-vsctl", f"--db={self._db(switch)}", "--timeout=10", *args])

    def _start_vswitchd(self, switch: int) -> None:
        ns = self.topo.names.switch(switch)
        # --disable-system: no kernel datapath is tried. The daemon is the switch's
        # forwarding, so it runs at the mechanism's priority (shell.MECHANISM_PRIORITY), before
        # the VMs' applications, as a Linux switch forwards in softirq before any process.
        shell.run(shell.in_ns(ns, "ovs-vswitchd", self._db(switch),
                              f"--pidfile={self._file(switch, 'ovs-vswitchd.pid')}",
                              f"--unixctl={self._file(switch, 'ovs-vswitchd.ctl')}",
                              f"--log-file={self._file(switch, 'ovs-vswitchd.log')}",
                              "--detach", "--no-chdir", "--disable-system"), env=self._env(),
                  priority=shell.MECHANISM_PRIORITY)

    def restart(self, switch: int) -> None:
        """Kills the switch's ovs-vswitchd and starts it again: the bridge comes back from
        the database, its rules do not (a switch that restarts loses its flow table)."""
        pid_file = self._file(switch, "ovs-vswitchd.pid")
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        if shell.wait_exited([pid], 5.0):
            raise TestbedError(f"ovs-vswitchd of switch {switch} did not die")
        pid_file.unlink(missing_ok=True)
        self._start_vswitchd(switch)
        self._open_buffers(switch)

    def _open_buffers(self, switch: int) -> None:
        """Gives the switch's vswitchd packet sockets their buffers (the module's docstring
        says why), through duplicates of its descriptors (pidfd_getfd). The send socket opens
        at the first frame sent, so one frame is sent out of a port first."""
        pid = int(self._file(switch, "ovs-vswitchd.pid").read_text().split()[0])
        ports = self.topo.switch_ports[switch]
        deadline = time.monotonic() + 10.0
        while True:
            try:
                shell.run(["ovs-ofctl", "-O", "OpenFlow13", "packet-out", self.mgmt(switch),
                           f"in_port=controller,packet={PRIMING_FRAME},"
                           f"actions=output:{ofport(min(ports))}"])
            except TestbedError:
                pass  # the bridge is not up yet after a restart
            sockets = packet_sockets(pid)
            if len(sockets) > len(ports):  # one per port, and the send socket
                break
            if time.monotonic() > deadline:
                raise TestbedError(f"ovs-vswitchd of switch {switch} opened {len(sockets)} "
                                   f"packet sockets, expected {len(ports) + 1}")
            time.sleep(0.05)
        pidfd = os.pidfd_open(pid)
        try:
            for fd in sockets:
                mine = ctypes.CDLL(None, use_errno=True).syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
                if mine < 0:
                    raise TestbedError(f"cannot reach ovs-vswitchd's socket {fd}: "
                                       f"{os.strerror(ctypes.get_errno())}")
                with socket.socket(fileno=mine) as s:
                    s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SEND_BUFFER)
                    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        finally:
            os.close(pidfd)

    def dump_flows(self, switch: int) -> list[str]:
        """The bridge's rules as `ovs-ofctl dump-flows` prints them, one per line."""
        said = shell.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", self.mgmt(switch)])
        return [line.strip() for line in said.splitlines()[1:] if line.strip()]


def packet_sockets(pid: int) -> list[int]:
    """The descriptors of process `pid`'s packet sockets (AF_PACKET), by the inodes its
    namespace's /proc/net/packet lists."""
    with open(f"/proc/{pid}/net/packet") as table:
        inodes = {line.split()[-1] for line in list(table)[1:]}
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if (m := re.fullmatch(r"socket:\[(\d+)\]", target)) and m.group(1) in inodes:
            found.append(int(fd))
    return found
