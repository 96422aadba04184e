"""The testbed's SDN controller: an os-ken application, run by `tacc testbed` in a process of
its own (`python -m tacc.testbed.controller CONFIG.json`), that drives the mechanism's
controller from tacc-mech (`tacc._core.Controller`) with OpenFlow 1.3 on the run's Open vSwitch
bridges. It translates, and decides nothing itself: OpenFlow events become the state
machine's inputs (packet-ins, statistics replies, its timer) and its outputs become OpenFlow
messages, requests to the switch agents and notifications to the host agents.

Each switch's tables, installed when it connects (again after a restart of either side):

    table 0  accounting: one rule per flow (5-tuple) counting its bytes, installed when the
             flow's first packet misses and reaches the controller (the switch's mechanism
             hook then decides whether the app hears of it, as in the simulator); only in
             switches where the mechanism has a hook; then table 1
    table 1  the mechanism's rules (SICC's SYN/FIN copies, SDN-ECN's marking rules); then 2.
             A copy rule that matches TCP flags only is left out of the switches whose
             agent's port programs report those packets instead (`reports`, below)
    table 2  routes: a rule per destination VM (next hop's MAC, TTL, output port); where the
             route has equal ports (ECMP), the destination's rule sends a flow's first packet
             to the controller, which installs a rule for the flow's 5-tuple out of the port
             the engine's hash picks (`route_port`) and sends the packet on: the mechanisms'
             path oracle is then the path the packets take

What OpenFlow cannot give (a port's ECN mark count, its queue length) the switch agent serves
on its stats socket. The switch agents of `port_copies` send the copies their ports make to the
`reports` socket, as packet-ins: Open vSwitch's userspace datapath makes a rule's copy in the
thread that forwards, which stalls the switch for milliseconds at a volley of SYNs. Port and
flow byte counters come from OpenFlow statistics, Ethernet headers taken off; they and the mark
counts are scaled to the plan's rates over the app's time, so that the app sees the counters
the simulator would show it. The app's time runs at `time_scale` times real time (the agents'
Clock: dilated by the rate scale for SDN-GCC), and its timers, rule timeouts and the scenario's
`latency` (one way, on every message in and out) with it. Rules with a hard timeout of whole
seconds (of real time) get it from the switch; others are deleted by the controller when they
expire. Message and byte counts go to `counts` (JSON), carried over when the controller
restarts.

A mechanism whose app installs no rule the switch agents cannot serve and reads no OpenFlow
counter (SICC: its copies and queue lengths come from the agents) needs no OpenFlow: with
`"openflow": false` the `Driver` runs alone, beside Linux switches.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tacc.testbed.plan import port_pairs
from tacc.testbed.topology import port_mac

LOG = logging.getLogger("tacc.controller")

ACCOUNTING, MECHANISM, ROUTES = 0, 1, 2
ACCOUNT_PRIORITY = 10
ROUTE_PRIORITY = 10
COOKIE_ACCOUNT = 1 << 48  # | the flow's output port
ETH_HEADER = 14
STATS_TIMEOUT_S = 0.05
PORT_COPY_MAGIC = b"TACCP1"
COUNTS_EVERY_S = 0.5

CONFIG: dict[str, Any] = {}

try:
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import (
        CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls,
    )
    from os_ken.lib import hub
    from os_ken.ofproto import ofproto_v1_3
except ImportError:  # the module still imports (for its docs); main() says what is missing
    app_manager = None  # type: ignore[assignment]


class Counts:
    """Control messages and bytes by kind, as the simulator's summary names them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
        self.messages: dict[str, int] = saved.get("messages", {})
        self.bytes: dict[str, int] = saved.get("bytes", {})
        self.events: dict[str, int] = saved.get("events", {})
        self.starts = saved.get("starts", 0) + 1
        self.latency_s = 0.0
        self.writes = 0

    def add(self, kind: str, size: int) -> None:
        self.messages[kind] = self.messages.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + size

    def event(self, kind: str, n: int = 1) -> None:
        self.events[kind] = self.events.get(kind, 0) + n

    def write(self, status: dict[str, Any] | None = None) -> None:
        # A file of its own for each write: two writes into one temporary file (the counts
        # loop's and the exit's) once left the first's tail behind the second's JSON.
        self.writes += 1
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{self.writes}")
        tmp.write_text(json.dumps({"messages": self.messages, "bytes": self.bytes,
                                   "events": self.events, "starts": self.starts,
                                   "latency_s": self.latency_s, **(status or {})}),
                       encoding="utf-8")
        os.replace(tmp, self.path)


class Driver:
    """The mechanism's controller app and all it talks to but the switches' OpenFlow: its
    clock and timer, the switch agents' copies and stats, the host agents and the counts.
    `TaccController` adds the switches and the book of the rules installed in them. Alone (`"openflow": false`), it runs
    beside Linux switches a mechanism whose app needs no rule and no OpenFlow counter
    (`tacc.testbed.run.controller_kind`: SICC, whose copies and queue lengths the switch
    agents serve)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from tacc import _core
        from tacc.testbed.apps import INCAST_CONTROL_PORT

        self.plan = cfg["plan"]
        # The incasts' requests cross the network here as TCP connections (the engine
        # hands them over in its own process): their packets are not the scenario's, and
        # SICC, seeing their SYNs, read the queue of every worker's port each interval.
        self.control_ports = {INCAST_CONTROL_PORT + a
                              for a, app in enumerate(self.plan["apps"]) if app.get("incast")}
        self.mech = _core.Controller(json.dumps(self.plan))
        # The app's time zero is the flows' (the run's `go` file says when), as in the
        # simulator, where the mechanism starts with the scenario: its periodic work
        # (SDN-ECN's probes, SDN-GCC's intervals) then falls at the same points of the
        # flows' lives run after run. Until then its clock stands at zero.
        self.go = Path(cfg["go"]) if "go" in cfg else None
        self.start_ns: int | None = None if self.go else cfg["start_mono_ns"]
        # The app's clock runs at time_scale times real time (the agents' Clock); its
        # counters then grow by rate_scale / time_scale times what the plan's rates give.
        self.time_scale = cfg.get("time_scale", 1.0)
        self.counter_scale = cfg["rate_scale"] / self.time_scale
        self.latency_s = self._real_s(self.mech.latency_ns)
        self.counts = Counts(Path(cfg["counts"]))
        self.counts.latency_s = self.latency_s
        self.hosts = _host_delivery(cfg, self.plan)
        # Switch -> its agent's stats: a Unix socket's path, or a signed UDP address.
        self.switch_stats: dict[int, str | _UdpStats] = {
            int(i): _UdpStats(p["address"], p["key"]) if isinstance(p, dict) else p
            for i, p in cfg["switch_stats"].items()}
        self.ready = Path(cfg["ready"])
        self.reply_path = Path(cfg["reply_socket"])
        self.reply_path.unlink(missing_ok=True)
        self.stats_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.stats_sock.bind(str(self.reply_path))
        self.stats_sock.settimeout(STATS_TIMEOUT_S)
        # Switches whose agents copy in their ports: only where the copies have a socket
        # to come to (else the copy rules stay).
        self.port_copies = {int(i) for i in cfg.get("port_copies", [])
                            if "reports" in cfg}
        self.reports: socket.socket | None = None
        if "reports" in cfg:
            Path(cfg["reports"]).unlink(missing_ok=True)
            self.reports = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.reports.bind(cfg["reports"])
        self.vm_of_ip = {_ip(v["address"]): k for k, v in enumerate(self.plan["vms"])}
        self.routes = {(r["switch"], r["vm"]): r["ports"] for r in self.plan["routes"]}
        # Plan port -> the other direction of its link.
        if "reverse" in cfg:
            self.reverse = {int(a): b for a, b in cfg["reverse"].items()}
        else:
            self.reverse = {a: b for pair in port_pairs(self.plan)
                            for a, b in (pair, pair[::-1])}
        self.configured: set[int] = set()  # switches whose OpenFlow tables are in place
        self.remove_on_exit = [Path(p) for p in cfg.get("remove_on_exit", [])]
        self.loops: list[Any] = []

    def run_loops(self) -> None:
        """Its loops and its exit on a signal; after the constructors, whose state they
        read (not `start`: OSKenApp's, which runs an app's event loop)."""
        self.loops = [hub.spawn(self._timer_loop), hub.spawn(self._counts_loop)]
        if self.reports is not None:
            self.loops.append(hub.spawn(self._reports_loop))

        def stop(*_: object) -> None:
            self.counts.write()
            for path in self.remove_on_exit:
                path.unlink(missing_ok=True)
            os._exit(0)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop)

    def now(self) -> int:
        if self.start_ns is None and self.go is not None:
            try:
                self.start_ns = int(json.loads(self.go.read_text())["start_mono_ns"])
            except (OSError, ValueError, KeyError):
                return 0
        assert self.start_ns is not None
        return max(0, round((time.monotonic_ns() - self.start_ns) * self.time_scale))

    def _real_s(self, ns: int) -> float:
        """The real seconds that `ns` of the app's time take."""
        return ns / 1e9 / self.time_scale

    def _in_control(self) -> None:
        """Every switch is ready: the hosts' agents hear from this controller now."""
        self.hosts.take_control()
        if not self.ready.exists():
            # The status first: whoever waits for `ready` reads it next.
            self.counts.write(self.status())
            self.ready.write_text("ready\n")

    # -------------------------------------------------------------------- events in

    def _to_app(self, switch: int, in_port: int, out_port: int | None, ip: bytes,
                ignored: str) -> None:
        """A packet-in (or a port's copy) to the mechanism, and its outputs on."""
        try:
            out = self.mech.packet_in(self.now(), switch, in_port, out_port, ip)
        except ValueError as exc:
            LOG.warning("switch %d: %s: not handled: %s", switch, ignored, exc)
            self.counts.event(ignored)
            return
        self._dispatch(out)

    def _reports_loop(self) -> None:
        assert self.reports is not None
        while True:
            try:
                datagram = self.reports.recv(256)
            except OSError:  # the loop must outlive a bad moment: copies keep coming
                LOG.exception("reading the switch agents' copies")
                self.counts.event("handler_errors")
                hub.sleep(0.01)
                continue
            # A copy stands for the packet-in the switch would have sent.
            self.counts.add("packet_in", len(datagram))
            self.counts.event("port_copies")
            self._later(self._port_copy, datagram)

    def _port_copy(self, datagram: bytes) -> None:
        """A copy from a switch agent: the magic, the switch, the port the packet left
        by, its IPv4 and TCP headers (crates/tacc-agent/src/switch.rs, `Reports`)."""
        if len(datagram) < 34 or not datagram.startswith(PORT_COPY_MAGIC):
            self.counts.event("port_copies_ignored")
            return
        switch = int.from_bytes(datagram[6:10])
        out_port = int.from_bytes(datagram[10:14])
        ip = datagram[14:]
        if self._is_app_control(ip):
            self.counts.event("packet_ins_of_app_control")
            return
        # The port it came in by is not seen at the output: it is the route back to the
        # source (a copy rule's app reads where the packet goes, not where it came from;
        # under ECMP, the first of the equal ports).
        src = self.vm_of_ip.get(int.from_bytes(ip[12:16]))
        back = self.routes.get((switch, src)) if src is not None else None
        if switch not in self.port_copies or not back:
            self.counts.event("port_copies_ignored")
            return
        self._to_app(switch, self.reverse[back[0]], out_port, ip, "port_copies_ignored")

    def _is_app_control(self, ip: bytes) -> bool:
        """A TCP packet to or from an incast's control port."""
        ihl = (ip[0] & 0x0F) * 4
        if not self.control_ports or ip[9] != 6 or len(ip) < ihl + 4:
            return False
        ports = int.from_bytes(ip[ihl:ihl + 2]), int.from_bytes(ip[ihl + 2:ihl + 4])
        return not self.control_ports.isdisjoint(ports)

    # -------------------------------------------------------------------- the app's outputs

    def _timer_loop(self) -> None:
        while True:
            at = self.mech.poll_at()
            now = self.now()
            if at is not None and at <= now:
                self._dispatch(self.mech.timer(now))
                continue
            wait = 0.01 if at is None else min(0.01, self._real_s(at - now))
            hub.sleep(wait)

    def _dispatch(self, out: list[str]) -> None:
        for text in out:
            message = json.loads(text)
            ((kind, body),) = message.items()
            if kind == "StatsRequest":
                self._later(self._stats_request, body)
            elif kind == "FlowMod":
                self._later(self._app_flow_mod, body)
            elif kind == "ToHost":
                self._later(self._to_host, body)
            else:
                LOG.warning("the app sent %s: not a controller output", kind)

    def _later(self, fn: Any, *args: Any) -> None:
        """Runs `fn` after the scenario's one-way control latency; errors are logged
        and survived, as a controller must."""
        def run() -> None:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one bad message must not stop the app
                LOG.exception("control message not handled")
                self.counts.event("handler_errors")

        if self.latency_s > 0:
            hub.spawn_after(self.latency_s, run)
        else:
            run()

    def _stats_request(self, body: dict[str, Any]) -> None:
        ((kind, req),) = body.items()
        switch = req["switch"]
        if kind == "Switch":
            self._openflow_stats(switch)
            return
        agent = self.switch_stats.get(switch)
        if agent is None:
            return
        request = json.dumps(body).encode()
        try:
            self.counts.add("stats_request", len(request))
            if isinstance(agent, _UdpStats):
                reply = agent.ask(request, lambda: self.counts.event("stats_replies_refused"))
            else:
                self.stats_sock.sendto(request, agent)
                reply = self.stats_sock.recv(4096)
        except (OSError, socket.timeout) as exc:
            LOG.warning("switch agent %d: no answer (%s)", switch, exc)
            self.counts.event("stats_timeouts")
            return
        self.counts.add("stats_reply", len(reply))
        self._later(self._stats_reply, self._plan_marks(reply.decode()))

    def _openflow_stats(self, switch: int) -> None:
        """Port and flow counters asked of `switch` by OpenFlow: none without it."""
        LOG.warning("switch %d: the app asked for OpenFlow counters; no OpenFlow here", switch)
        self.counts.event("openflow_unavailable")

    def _stats_reply(self, reply: str) -> None:
        self._dispatch(self.mech.stats_reply(self.now(), reply))

    def _plan_marks(self, reply: str) -> str:
        """A switch agent's reply with its port's mark count at the plan's rates: the
        port sends `rate_scale` times the packets it would at the scenario's rates, so in
        real time it marks that many times fewer, and SDN-GCC's cuts (marks per
        millisecond, Algorithm 3) would be that many times weaker than the simulator's."""
        message = json.loads(reply)
        marks = message.get("PortMarks")
        if marks is None:
            return reply
        marks["marks"] = round(marks["marks"] / self.counter_scale)
        return json.dumps(message)

    def _app_flow_mod(self, fm: dict[str, Any]) -> None:
        """A rule from the app: nowhere to install it without OpenFlow."""
        LOG.warning("switch %d: the app sent a rule; no OpenFlow here", fm["switch"])
        self.counts.event("openflow_unavailable")

    def _to_host(self, body: dict[str, Any]) -> None:
        vm_ip = _vm_of_message(body)
        vm = self.vm_of_ip.get(vm_ip)
        if vm is None:
            return
        host = self.plan["vms"][vm]["host"]
        try:
            size = self.hosts.send(host, body)
        except (OSError, KeyError) as exc:
            LOG.warning("host agent of %s: %s", self.plan["hosts"][host]["name"], exc)
            self.counts.event("host_message_errors")
            return
        self.counts.add("host_message", size)

    def _counts_loop(self) -> None:
        while True:
            hub.sleep(COUNTS_EVERY_S)
            self.counts.write(self.status())

    def status(self) -> dict[str, Any]:
        """Who is connected: the switches by name, and the hosts' agents."""
        names = [s["name"] for s in self.plan["switches"]]
        channel = self.hosts.end if isinstance(self.hosts, _ChannelAgents) else None
        return {"switches_connected": sorted(names[i] for i in self.configured),
                "agents_connected": sorted(channel.sessions) if channel else [],
                "agents_refused": channel.refused if channel else 0,
                "agents_refused_recently": list(channel.recent_refusals) if channel else []}


if app_manager is not None:

    # Driver first: OSKenApp's own __init__ calls the next class's with no arguments.
    class TaccController(Driver, app_manager.OSKenApp):  # type: ignore[misc,name-defined]
        OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            app_manager.OSKenApp.__init__(self, *args, **kwargs)
            Driver.__init__(self, CONFIG)
            cfg = CONFIG
            # Datapath id -> switch, plan port <-> OpenFlow port: a fabric config gives them;
            # the testbed numbers switch i as datapath i + 1 and plan port p as port p + 1.
            self.switch_of_dpid = {int(d): s for d, s in cfg.get("datapath_ids", {}).items()}
            self.ofport = {int(p): o for p, o in cfg.get("ofports", {}).items()}
            self.plan_port = {(s, o): p for p, (s, o) in
                              ((p, (self.plan["ports"][p]["from"]["switch"], o))
                               for p, o in self.ofport.items())}
            # On a fabric of Ethernet switches the VMs' frames already carry the next hop's
            # MAC (a host's VMs share a segment): a hop is the output port alone, and what is
            # not IPv4 (ARP) is forwarded as a learning switch does. The testbed routes: each
            # hop rewrites the MACs and decrements the TTL.
            self.l2 = bool(cfg.get("l2", False))
            self.datapaths: dict[int, Any] = {}
            self.accounted: dict[int, set[tuple[int, int, int, int, int]]] = {}
            self.routed: dict[int, set[tuple[int, int, int, int, int]]] = {}  # ECMP decided
            self.pending_switch_stats: dict[int, dict[str, Any]] = {}
            # Rules the app installed, kept to reinstall after a switch restart:
            # (switch, match JSON, priority) -> (FlowMod, its expiry in ns or None).
            self.rules: dict[tuple[int, str, int], tuple[dict[str, Any], int | None]] = {}
            self.run_loops()

        @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
        def switch_features(self, ev: Any) -> None:
            dp = ev.msg.datapath
            switch = self.switch_of_dpid.get(dp.id, -1) if self.switch_of_dpid else dp.id - 1
            if not 0 <= switch < len(self.plan["switches"]):
                LOG.warning("datapath %016x is not a switch of this run: ignored", dp.id)
                self.counts.event("unknown_datapaths")
                return
            LOG.info("switch %d (%s) connected", switch, self.plan["switches"][switch]["name"])
            self.counts.event("switch_connects")
            self.datapaths[switch] = dp
            self.configured.discard(switch)
            self.accounted[switch] = set()
            self.routed[switch] = set()
            self._configure(dp, switch)

        @set_ev_cls(ofp_event.EventOFPStateChange, [DEAD_DISPATCHER])
        def state_change(self, ev: Any) -> None:
            dp = ev.datapath
            for switch, known in list(self.datapaths.items()):
                if known is dp:
                    LOG.warning("switch %d disconnected", switch)
                    del self.datapaths[switch]
                    self.configured.discard(switch)

        def _configure(self, dp: Any, switch: int) -> None:
            """Everything a switch holds, from empty: it may have restarted, or kept the rules
            of a controller that did (fail mode secure), whose flows would not reach this one."""
            ofp, parser = dp.ofproto, dp.ofproto_parser
            self._send(dp, parser.OFPFlowMod(dp, table_id=ofp.OFPTT_ALL,
                                             command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY,
                                             out_group=ofp.OFPG_ANY), "setup")
            if self.mech.has_hook(switch):
                miss = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [
                    parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
            else:
                miss = []
            self._flow(dp, ACCOUNTING, 0, parser.OFPMatch(),
                       miss + [parser.OFPInstructionGotoTable(MECHANISM)], "setup")
            if self.l2 and miss:  # ARP goes on without the controller's hearing of it
                self._flow(dp, ACCOUNTING, 1, parser.OFPMatch(eth_type=0x0806),
                           [parser.OFPInstructionGotoTable(MECHANISM)], "setup")
            self._flow(dp, MECHANISM, 0, parser.OFPMatch(),
                       [parser.OFPInstructionGotoTable(ROUTES)], "setup")
            for (s, vm), ports in self.routes.items():
                if s != switch:
                    continue
                match = parser.OFPMatch(eth_type=0x0800, ipv4_dst=self.plan["vms"][vm]["address"])
                if len(ports) == 1:
                    action = self._output(dp, ports[0])
                else:
                    action = parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [
                        parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])
                self._flow(dp, ROUTES, ROUTE_PRIORITY, match, [action], "setup")
            if self.l2:
                self._flow(dp, ROUTES, 0, parser.OFPMatch(), [parser.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(ofp.OFPP_NORMAL)])],
                    "setup")
            for text in self.mech.initial_rules(switch, switch in self.port_copies):
                self._flow_mod(dp, json.loads(text), None, "flow_mod")
                self.counts.event("rules_installed")
            now = self.now()
            for (s, _, _), (fm, expiry) in list(self.rules.items()):
                if s == switch and (expiry is None or expiry > now):
                    self._flow_mod(dp, fm, None if expiry is None else expiry - now, "flow_mod")
            self._send(dp, parser.OFPBarrierRequest(dp), "setup")

        @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
        def barrier_reply(self, ev: Any) -> None:
            for switch, dp in self.datapaths.items():
                if dp is ev.msg.datapath:
                    self.configured.add(switch)
            if len(self.configured) == len(self.plan["switches"]):
                self._in_control()

        @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
        def packet_in(self, ev: Any) -> None:
            msg = ev.msg
            self.counts.add("packet_in", len(msg.buf))
            self._later(self._packet_in, msg)

        def _packet_in(self, msg: Any) -> None:
            switch = self._switch_of(msg.datapath)
            frame = bytes(msg.data)
            if switch is None or len(frame) < ETH_HEADER + 20 or frame[12:14] != b"\x08\x00":
                self.counts.event("packet_ins_ignored")
                return
            ip = frame[ETH_HEADER:]
            if msg.table_id == ROUTES:
                self._route_flow(msg.datapath, switch, ip, msg)
                return
            # The packet came in on the device whose egress is plan port ofport - 1: it
            # arrived by the link's other direction, the port the engine calls in_port.
            egress = self._plan_port(switch, msg.match["in_port"])
            if egress is None:
                self.counts.event("packet_ins_ignored")
                return
            in_port = self.reverse[egress]
            out_port = None
            if msg.table_id == ACCOUNTING:
                self._account(msg.datapath, switch, ip)
            elif self._is_app_control(ip):
                self.counts.event("packet_ins_of_app_control")
                return
            else:
                out_port = self._route_port(switch, ip)
            self._to_app(switch, in_port, out_port, ip, "packet_ins_ignored")

        @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
        def port_stats(self, ev: Any) -> None:
            self.counts.add("stats_reply", len(ev.msg.buf))
            self._later(self._switch_stats_part, ev.msg, "ports")

        @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
        def flow_stats(self, ev: Any) -> None:
            self.counts.add("stats_reply", len(ev.msg.buf))
            self._later(self._switch_stats_part, ev.msg, "flows")

        @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
        def flow_removed(self, ev: Any) -> None:
            # A marking rule is two OpenFlow rules (ECT(0), ECT(1)): counted once.
            if ev.msg.match.get("ip_ecn", 1) == 1:
                self.counts.event("rules_expired")

        @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
        def error(self, ev: Any) -> None:
            msg = ev.msg
            LOG.warning("switch error type=%d code=%d", msg.type, msg.code)
            self.counts.event("openflow_errors")

        def _openflow_stats(self, switch: int) -> None:
            dp = self.datapaths.get(switch)
            if dp is None:
                return
            ofp, parser = dp.ofproto, dp.ofproto_parser
            self.pending_switch_stats[switch] = {"ports": None, "flows": [],
                                                 "flows_done": False}
            self._send(dp, parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY), "stats_request")
            self._send(dp, parser.OFPFlowStatsRequest(
                dp, 0, ACCOUNTING, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE_ACCOUNT,
                COOKIE_ACCOUNT), "stats_request")

        def _switch_stats_part(self, msg: Any, part: str) -> None:
            switch = self._switch_of(msg.datapath)
            pending = self.pending_switch_stats.get(switch) if switch is not None else None
            if pending is None:
                return
            more = msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE
            if part == "ports":
                pending["ports"] = [
                    {"switch": switch, "port": port,
                     "tx_bytes": self._plan_bytes(s.tx_bytes, s.tx_packets)}
                    for s in msg.body
                    if (port := self._plan_port(switch, s.port_no)) is not None
                ]
            else:
                for s in msg.body:
                    key = _flow_key(s.match)
                    if key is not None:
                        pending["flows"].append({
                            "switch": switch, "port": s.cookie & 0xFFFF_FFFF, "key": key,
                            "bytes": self._plan_bytes(s.byte_count, s.packet_count)})
                pending["flows_done"] = not more
            if pending["ports"] is not None and pending["flows_done"]:
                del self.pending_switch_stats[switch]
                flows = sorted(pending["flows"], key=lambda f: (f["port"], sorted(f["key"].items())))
                reply = {"Switch": {"switch": switch, "ports": pending["ports"], "flows": flows}}
                self._stats_reply(json.dumps(reply))

        def _plan_bytes(self, frame_bytes: int, packets: int) -> int:
            """IP bytes at the plan's rates, from a counter of Ethernet frames at the
            testbed's."""
            return round((frame_bytes - ETH_HEADER * packets) / self.counter_scale)

        @staticmethod
        def _rule_key(fm: dict[str, Any]) -> tuple[int, str, int]:
            """A rule as OpenFlow identifies it: switch, match, priority."""
            return fm["switch"], json.dumps(fm["rule_match"], sort_keys=True), fm["priority"]

        def _app_flow_mod(self, fm: dict[str, Any]) -> None:
            timeout = fm["hard_timeout"]
            expiry = None if timeout is None else self.now() + timeout
            key = self._rule_key(fm)
            if fm["command"] == "Delete":
                self.rules.pop(key, None)
            else:
                self.rules[key] = (fm, expiry)
                self.counts.event("rules_installed")
            dp = self.datapaths.get(fm["switch"])
            if dp is not None:
                self._flow_mod(dp, fm, timeout, "flow_mod")

        def _expire(self, fm: dict[str, Any], expiry: int) -> None:
            if self.rules.get(self._rule_key(fm), (None, None))[1] != expiry:
                return  # replaced since
            self._app_flow_mod(dict(fm, command="Delete"))
            self.counts.event("rules_expired")

        def _flow_mod(self, dp: Any, fm: dict[str, Any], timeout: int | None, kind: str) -> None:
            """A tacc-mech FlowMod as OpenFlow, to live `timeout` ns (None: for ever): one rule,
            or two where only ECN-capable packets may be marked (ECT(0) and ECT(1))."""
            ofp, parser = dp.ofproto, dp.ofproto_parser
            m, a = fm["rule_match"], fm["actions"]
            fields: dict[str, Any] = {"eth_type": 0x0800}
            for name, of in (("src", "ipv4_src"), ("dst", "ipv4_dst")):
                if m[name] is not None:
                    fields[of] = _dotted(m[name])
            if m["protocol"] is not None or m["flags_mask"]:
                fields["ip_proto"] = m["protocol"] if m["protocol"] is not None else 6
            l4 = {6: "tcp", 17: "udp"}.get(fields.get("ip_proto", -1))
            if l4:
                if m["sport"] is not None:
                    fields[f"{l4}_src"] = m["sport"]
                if m["dport"] is not None:
                    fields[f"{l4}_dst"] = m["dport"]
            if m["flags_mask"]:
                fields["tcp_flags"] = (m["flags_value"], m["flags_mask"])
            variants = [dict(fields, ip_ecn=e) for e in (1, 2)] if a["set_ce"] else [fields]
            if fm["command"] == "Delete":
                for f in variants:
                    self._send(dp, parser.OFPFlowMod(
                        dp, table_id=MECHANISM, command=ofp.OFPFC_DELETE_STRICT,
                        priority=fm["priority"], out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                        match=parser.OFPMatch(**f)), kind)
                return
            actions = []
            if a["set_ce"]:
                actions.append(parser.OFPActionSetField(ip_ecn=3))
            if a["copy_to_controller"]:
                actions.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
            forward = a["forward"]
            instructions = []
            if isinstance(forward, dict):  # {"Port": p}
                instructions = [self._output(dp, forward["Port"], actions)]
            elif forward == "Normal":
                if actions:
                    instructions.append(parser.OFPInstructionActions(
                        ofp.OFPIT_APPLY_ACTIONS, actions))
                instructions.append(parser.OFPInstructionGotoTable(ROUTES))
            hard = 0
            if timeout is not None:
                real_ns = round(timeout / self.time_scale)
                if real_ns % 1_000_000_000 == 0:
                    hard = real_ns // 1_000_000_000
                else:  # OpenFlow counts whole seconds: the controller deletes it on time
                    expiry = self.rules[self._rule_key(fm)][1]
                    hub.spawn_after(real_ns / 1e9, self._expire, fm, expiry)
            for f in variants:
                self._send(dp, parser.OFPFlowMod(
                    dp, table_id=MECHANISM, command=ofp.OFPFC_ADD, priority=fm["priority"],
                    hard_timeout=hard, flags=ofp.OFPFF_SEND_FLOW_REM if hard else 0,
                    match=parser.OFPMatch(**f), instructions=instructions), kind)

        def _output(self, dp: Any, port: int, before: list[Any] | None = None) -> Any:
            """Apply-actions that send a packet out of plan port `port` to the next hop."""
            return dp.ofproto_parser.OFPInstructionActions(
                dp.ofproto.OFPIT_APPLY_ACTIONS, [*(before or []), *self._hop(dp, port)])

        def _plan_port(self, switch: int, ofport: int) -> int | None:
            """The plan port whose egress is OpenFlow port `ofport` of `switch`."""
            if self.ofport:
                return self.plan_port.get((switch, ofport))
            return ofport - 1 if 0 < ofport <= len(self.plan["ports"]) else None

        def _hop(self, dp: Any, port: int) -> list[Any]:
            """The actions of a hop out of plan port `port`: TTL, the MACs, the port (the
            port alone on an Ethernet fabric)."""
            parser = dp.ofproto_parser
            if self.l2:
                return [parser.OFPActionOutput(self.ofport[port], 0)]
            return [parser.OFPActionDecNwTtl(),
                    parser.OFPActionSetField(eth_src=port_mac(port)),
                    parser.OFPActionSetField(eth_dst=port_mac(self.reverse[port])),
                    parser.OFPActionOutput(port + 1, 0)]

        def _route_port(self, switch: int, ip: bytes) -> int | None:
            return self.mech.route_port(switch, *_five_tuple(ip))

        def _route_flow(self, dp: Any, switch: int, ip: bytes, msg: Any) -> None:
            """A flow's first packet at a switch with equal ports towards its destination:
            a rule for the flow out of the port the engine's hash picks, and the packet sent
            on by it (every packet that came before the rule took hold, too)."""
            key = _five_tuple(ip)
            port = self._route_port(switch, ip)
            if port is None:
                self.counts.event("packet_ins_ignored")
                return
            parser = dp.ofproto_parser
            if key not in self.routed[switch]:
                self.routed[switch].add(key)
                self.counts.event("ecmp_flows")
                self._flow(dp, ROUTES, ROUTE_PRIORITY + 1, parser.OFPMatch(**_match(key)),
                           [self._output(dp, port)], "routing")
            self._send(dp, parser.OFPPacketOut(
                dp, buffer_id=dp.ofproto.OFP_NO_BUFFER, in_port=msg.match["in_port"],
                actions=self._hop(dp, port), data=msg.data), "routing")

        def _account(self, dp: Any, switch: int, ip: bytes) -> None:
            """A per-flow counting rule for the flow of this packet (once per flow)."""
            key = _five_tuple(ip)
            seen = self.accounted.setdefault(switch, set())
            out = self._route_port(switch, ip)
            if key in seen or out is None:
                return
            seen.add(key)
            parser = dp.ofproto_parser
            self._flow(dp, ACCOUNTING, ACCOUNT_PRIORITY, parser.OFPMatch(**_match(key)),
                       [parser.OFPInstructionGotoTable(MECHANISM)], "accounting",
                       cookie=COOKIE_ACCOUNT | out)

        def _flow(self, dp: Any, table: int, priority: int, match: Any, instructions: list[Any],
                  kind: str, cookie: int = 0) -> None:
            parser = dp.ofproto_parser
            self._send(dp, parser.OFPFlowMod(dp, cookie=cookie, table_id=table,
                                             command=dp.ofproto.OFPFC_ADD, priority=priority,
                                             match=match, instructions=instructions), kind)

        def _send(self, dp: Any, msg: Any, kind: str) -> None:
            dp.send_msg(msg)
            self.counts.add(kind, len(msg.buf))

        def _switch_of(self, dp: Any) -> int | None:
            for switch, known in self.datapaths.items():
                if known is dp:
                    return switch
            return None


class _UdpStats:
    """A switch agent on another machine: its stats over UDP, each request and reply signed
    with the switch's key (the protocol is `StatsSocket`'s, crates/tacc-agent/src/switch.rs),
    a reply taken only with the nonce of the request it answers."""

    MAGIC = b"TACCS1"

    def __init__(self, address: str, key_hex: str) -> None:
        host, _, port = address.rpartition(":")
        family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
        self.key = bytes.fromhex(key_hex)
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        # Connected: the kernel drops datagrams from anyone but the agent.
        self.sock.connect((host.strip("[]"), int(port)))

    def ask(self, request: bytes, refused: Any) -> bytes:
        """The reply to `request` within STATS_TIMEOUT_S (socket.timeout otherwise, however
        many other datagrams come); a datagram that is not it (late, replayed, forged) is
        dropped and `refused()` called."""
        from tacc.deploy.channel import NONCE_LEN, _mac

        nonce = os.urandom(NONCE_LEN)
        self.sock.send(self.MAGIC + nonce + _mac(self.key, b"request", nonce, request) + request)
        deadline = time.monotonic() + STATS_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            data = self.sock.recv(4096)
            head, tag, reply = data[:NONCE_LEN], data[NONCE_LEN:NONCE_LEN + 32], \
                data[NONCE_LEN + 32:]
            if head == nonce and hmac.compare_digest(tag, _mac(self.key, b"reply", nonce, reply)):
                return reply
            refused()
        raise TimeoutError("no reply")


class _UnixAgents:
    """The testbed's host agents: a signed datagram to each one's control socket."""

    def __init__(self, key_path: str, sockets: dict[int, str]) -> None:
        from tacc.testbed.control import ControlSender

        self.sender = ControlSender(key_path)
        self.sockets = sockets

    def send(self, host: int, message: dict[str, Any]) -> int:
        """Sends `message` to `host`'s agent; returns its size on the channel."""
        return len(self.sender.send(self.sockets[host], message))

    def take_control(self) -> None:
        pass  # the testbed's agents start with the run and see no outage to come back from


class _ChannelAgents:
    """Host agents on real hypervisors, over the TCP control channel (tacc.deploy.channel)."""

    def __init__(self, listen: str, keys: dict[str, str], names: list[str]) -> None:
        from tacc.deploy.channel import ControllerEnd

        host, _, port = listen.rpartition(":")
        self.end = ControllerEnd({n: bytes.fromhex(k) for n, k in keys.items()},
                                 (host, int(port)))
        self.names = names

    def send(self, host: int, message: dict[str, Any]) -> int:
        name = self.names[host]
        if name not in self.end.sessions:
            raise OSError("not connected")
        return self.end.send(name, message)

    def take_control(self) -> None:
        self.end.take_control()


class _NoAgents:
    """A mechanism whose controller sends the hosts nothing (SDN-ECN)."""

    def send(self, host: int, message: dict[str, Any]) -> int:
        raise OSError("no host agents are configured")

    def take_control(self) -> None:
        pass


def _host_delivery(cfg: dict[str, Any],
                   plan: dict[str, Any]) -> _UnixAgents | _ChannelAgents | _NoAgents:
    if "channel" in cfg:
        return _ChannelAgents(cfg["channel"]["listen"], cfg["channel"]["keys"],
                              [h["name"] for h in plan["hosts"]])
    if "agents" in cfg:
        return _UnixAgents(cfg["control_key"], {int(j): p for j, p in cfg["agents"].items()})
    return _NoAgents()


def _ip(address: str) -> int:
    return int.from_bytes(socket.inet_aton(address), "big")


def _dotted(ip: int) -> str:
    return socket.inet_ntoa(ip.to_bytes(4, "big"))


def _five_tuple(ip: bytes) -> tuple[int, int, int, int, int]:
    """(source, destination, protocol, source port, destination port) of an IPv4 packet;
    ports 0 but for TCP and UDP."""
    ihl = (ip[0] & 0x0F) * 4
    proto = ip[9]
    sport = dport = 0
    if proto in (6, 17) and len(ip) >= ihl + 4:
        sport = int.from_bytes(ip[ihl:ihl + 2], "big")
        dport = int.from_bytes(ip[ihl + 2:ihl + 4], "big")
    return int.from_bytes(ip[12:16], "big"), int.from_bytes(ip[16:20], "big"), proto, sport, dport


def _match(key: tuple[int, int, int, int, int]) -> dict[str, Any]:
    """OFPMatch fields of a 5-tuple."""
    src, dst, proto, sport, dport = key
    fields: dict[str, Any] = {"eth_type": 0x0800, "ipv4_src": _dotted(src),
                              "ipv4_dst": _dotted(dst), "ip_proto": proto}
    if proto in (6, 17):
        l4 = "tcp" if proto == 6 else "udp"
        fields[f"{l4}_src"], fields[f"{l4}_dst"] = sport, dport
    return fields


def _flow_key(match: Any) -> dict[str, int] | None:
    """A per-flow rule's match as a tacc-mech FlowKey."""
    try:
        proto = match["ip_proto"]
        l4 = {6: "tcp", 17: "udp"}.get(proto)
        return {"src": _ip(match["ipv4_src"]), "dst": _ip(match["ipv4_dst"]),
                "src_port": match[f"{l4}_src"] if l4 else 0,
                "dst_port": match[f"{l4}_dst"] if l4 else 0, "protocol": proto}
    except KeyError:
        return None


def _vm_of_message(body: dict[str, Any]) -> int:
    """The VM a HostMessage is about (HostMessage::vm): its host receives it."""
    ((kind, inner),) = body.items()
    if kind == "Congestion":
        return inner["to_src"]
    ((_, fields),) = inner.items()
    return fields["src"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tacc.testbed.controller CONFIG.json", file=sys.stderr)
        return 2
    if app_manager is None:
        print("tacc-controller: error: os-ken is not installed (pip install os-ken)",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(json.loads(Path(argv[0]).read_text(encoding="utf-8")), "0.0.0.0")
    return 0


def serve(config: dict[str, Any], host: str) -> None:
    """Runs the app with `config` until the process is stopped, its switches connecting to
    `host`:`config["listen"]`; with `"openflow": false`, the Driver alone, and no switch."""
    hub.patch(thread=False)
    if not config.get("openflow", True):
        driver = Driver(config)
        driver.run_loops()
        driver._in_control()
        hub.joinall(driver.loops)
        return
    import tacc.testbed.controller as this
    from os_ken import cfg
    from os_ken.controller import controller as _  # registers the OpenFlow options

    this.CONFIG.update(config)
    cfg.CONF(args=[], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", host)
    cfg.CONF.set_override("ofp_tcp_listen_port", this.CONFIG["listen"])
    app_manager.AppManager.run_apps(["tacc.testbed.controller"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
