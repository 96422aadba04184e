//! The control plane's messages: what switches, controller apps and host shims say to each
//! other. Plain serializable data, so the simulator's control channel, a controller process
//! and a Linux host agent carry the very same messages (over a socket, as JSON or any serde
//! format). Sizes on the wire follow OpenFlow 1.3 framing where it applies.

use serde::{Deserialize, Serialize};

use crate::vocab::headers::{ip_proto, FlowKey};
use crate::vocab::units::Nanos;

/// The header fields a switch copies to the controller with a packet-in (the first bytes of
/// the packet, parsed). Ports are the transport ports for TCP and UDP alike: what an ECMP hash
/// reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketInHeaders {
    pub src: u32,
    pub dst: u32,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// TCP flag byte (0 for other protocols).
    pub tcp_flags: u8,
    /// MSS option of a SYN or SYN-ACK.
    pub mss: Option<u16>,
    /// Window scale option of a SYN or SYN-ACK.
    pub wscale: Option<u8>,
}

impl PacketInHeaders {
    /// The flow as a host shim names it ([`FlowKey::of`]: ports only for TCP and UDP).
    pub fn flow_key(&self) -> FlowKey {
        use crate::vocab::headers::ip_proto::{TCP, UDP};
        let ports = self.protocol == TCP || self.protocol == UDP;
        FlowKey {
            src: self.src,
            dst: self.dst,
            src_port: if ports { self.src_port } else { 0 },
            dst_port: if ports { self.dst_port } else { 0 },
            protocol: self.protocol,
        }
    }
}

/// Switch -> controller: a packet's headers, from a table miss (reactive forwarding) or a rule
/// whose action copies to the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketIn {
    pub switch: u32,
    pub in_port: u32,
    /// The port the switch forwards the packet to, when a rule copied it after forwarding.
    pub out_port: Option<u32>,
    pub headers: PacketInHeaders,
}

/// Controller -> switch: a counter reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StatsRequest {
    /// One port's cumulative count of ECN marks (CE set by the port's queue).
    PortMarks { switch: u32, port: u32 },
    /// One port's queue length now, in packets.
    QueueLength { switch: u32, port: u32 },
    /// Every port's transmitted bytes and every flow's bytes of one switch.
    Switch { switch: u32 },
}

impl StatsRequest {
    /// The switch asked.
    pub fn switch(&self) -> u32 {
        match *self {
            StatsRequest::PortMarks { switch, .. }
            | StatsRequest::QueueLength { switch, .. }
            | StatsRequest::Switch { switch } => switch,
        }
    }
}

/// One switch port's cumulative transmitted bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSample {
    pub switch: u32,
    pub port: u32,
    pub tx_bytes: u64,
}

/// One flow's cumulative bytes forwarded by `switch` out of `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSample {
    pub switch: u32,
    pub port: u32,
    pub key: FlowKey,
    pub bytes: u64,
}

/// Switch -> controller: the answer to a [`StatsRequest`], with the counters as they were
/// when the switch answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StatsReply {
    PortMarks {
        switch: u32,
        port: u32,
        marks: u64,
    },
    QueueLength {
        switch: u32,
        port: u32,
        pkts: u32,
    },
    Switch {
        switch: u32,
        ports: Vec<PortSample>,
        flows: Vec<FlowSample>,
    },
}

/// Header fields a rule matches; `None` is a wildcard. TCP flags match when
/// `flags & flags_mask == flags_value` (non-TCP packets never match a flags condition).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleMatch {
    pub src: Option<u32>,
    pub dst: Option<u32>,
    pub protocol: Option<u8>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub flags_mask: u8,
    pub flags_value: u8,
}

/// Where a matching packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Forward {
    /// Continue with the switch's routing table (ECMP).
    Normal,
    /// Send out of this port.
    Port(u32),
    Drop,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleActions {
    pub forward: Forward,
    /// Set the ECN field to CE (only on ECN-capable packets, as a marking AQM would).
    pub set_ce: bool,
    /// Send a copy of the headers to the controller (packet-in).
    pub copy_to_controller: bool,
}

/// Controller -> switch: add a rule, or delete the rules with exactly this match and priority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowMod {
    pub switch: u32,
    pub command: FlowModCommand,
    pub rule_match: RuleMatch,
    pub priority: u16,
    pub actions: RuleActions,
    /// The rule disappears this long after it is installed.
    pub hard_timeout: Option<Nanos>,
}

impl FlowMod {
    /// The TCP flags (mask, value) of a rule that only copies the packets with those flags
    /// to the controller: a copy a port program can make in the switch's place.
    pub fn tcp_flags_copy(&self) -> Option<(u8, u8)> {
        let flags_only = RuleMatch {
            protocol: Some(ip_proto::TCP),
            flags_mask: self.rule_match.flags_mask,
            flags_value: self.rule_match.flags_value,
            ..RuleMatch::default()
        };
        let copy_only = RuleActions {
            forward: Forward::Normal,
            set_ce: false,
            copy_to_controller: true,
        };
        (self.command == FlowModCommand::Add
            && self.rule_match == flags_only
            && self.rule_match.flags_mask != 0
            && self.actions == copy_only
            && self.hard_timeout.is_none())
        .then_some((self.rule_match.flags_mask, self.rule_match.flags_value))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlowModCommand {
    Add,
    Delete,
}

/// A congestion notification: the caller sends it (from `from_dst`'s address) to the shim of
/// `to_src`'s host, which lowers the rates of the pair.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Notify {
    pub to_src: u32,
    pub from_dst: u32,
    /// The share of the port's new marks attributed to this source (fractional).
    pub marks: f64,
}

/// An incast signal from the controller to the hypervisor of source VM `src` (an experimental
/// EtherType frame on the wire; it never reaches a VM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IncastMessage {
    /// Clamp rwnd of ACKs from `dst` to `src` to `mss >> wscale`.
    IncastOn {
        src: u32,
        dst: u32,
        wscale: u8,
        mss: u16,
    },
    IncastOff {
        src: u32,
        dst: u32,
    },
}

/// Controller -> host shim.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum HostMessage {
    /// Marks attributed to traffic of a local VM.
    Congestion(Notify),
    /// Incast ON/OFF for a (local source VM, destination) pair.
    Incast(IncastMessage),
}

impl HostMessage {
    /// The VM the message is about: the host running it receives the message.
    pub fn vm(&self) -> u32 {
        match self {
            HostMessage::Congestion(n) => n.to_src,
            HostMessage::Incast(IncastMessage::IncastOn { src, .. })
            | HostMessage::Incast(IncastMessage::IncastOff { src, .. }) => *src,
        }
    }
}

/// Everything that travels on the control channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ControlMessage {
    PacketIn(PacketIn),
    StatsRequest(StatsRequest),
    StatsReply(StatsReply),
    FlowMod(FlowMod),
    ToHost(HostMessage),
}

/// Sizes of control messages on the wire, in bytes.
pub mod wire_bytes {
    /// ofp_packet_in (32 B with its match) plus the first 64 bytes of the packet.
    pub const PACKET_IN: u64 = 96;
    /// Multipart request for one port's (or queue's) statistics.
    pub const STATS_REQUEST: u64 = 24;
    /// Multipart reply with one ofp_port_stats (112 B) behind a 16 B header.
    pub const PORT_STATS_REPLY: u64 = 128;
    /// Multipart reply header.
    pub const MULTIPART_HEADER: u64 = 16;
    /// One ofp_port_stats entry.
    pub const PORT_STATS_ENTRY: u64 = 112;
    /// One ofp_flow_stats entry with a 5-tuple match.
    pub const FLOW_STATS_ENTRY: u64 = 96;
    /// ofp_flow_mod with a 5-tuple match and set-field + output actions.
    pub const FLOW_MOD: u64 = 136;
    /// Congestion notification to a hypervisor: Ethernet + IPv4 + 2 bytes (the papers' 36 B).
    pub const NOTIFICATION: u64 = 36;
    /// Incast ON/OFF frame: a minimum-size Ethernet frame with an experimental EtherType.
    pub const INCAST_MESSAGE: u64 = 64;
}

impl ControlMessage {
    /// Bytes on the wire.
    pub fn wire_bytes(&self) -> u64 {
        use wire_bytes::*;
        match self {
            ControlMessage::PacketIn(_) => PACKET_IN,
            ControlMessage::StatsRequest(_) => STATS_REQUEST,
            ControlMessage::FlowMod(_) => FLOW_MOD,
            ControlMessage::StatsReply(StatsReply::Switch { ports, flows, .. }) => {
                MULTIPART_HEADER
                    + PORT_STATS_ENTRY * ports.len() as u64
                    + FLOW_STATS_ENTRY * flows.len() as u64
            }
            ControlMessage::StatsReply(_) => PORT_STATS_REPLY,
            ControlMessage::ToHost(HostMessage::Congestion(_)) => NOTIFICATION,
            ControlMessage::ToHost(HostMessage::Incast(_)) => INCAST_MESSAGE,
        }
    }

    /// The kind it is counted under.
    pub fn kind(&self) -> &'static str {
        match self {
            ControlMessage::PacketIn(_) => "packet_in",
            ControlMessage::StatsRequest(_) => "stats_request",
            ControlMessage::StatsReply(_) => "stats_reply",
            ControlMessage::FlowMod(_) => "flow_mod",
            ControlMessage::ToHost(_) => "host_message",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_survive_a_round_trip_through_json() {
        let msgs = vec![
            ControlMessage::PacketIn(PacketIn {
                switch: 3,
                in_port: 7,
                out_port: None,
                headers: PacketInHeaders {
                    src: 1,
                    dst: 2,
                    protocol: 6,
                    src_port: 10_000,
                    dst_port: 5001,
                    tcp_flags: 0x02,
                    mss: Some(1460),
                    wscale: Some(7),
                },
            }),
            ControlMessage::StatsReply(StatsReply::Switch {
                switch: 1,
                ports: vec![PortSample {
                    switch: 1,
                    port: 4,
                    tx_bytes: 1 << 40,
                }],
                flows: vec![],
            }),
            ControlMessage::ToHost(HostMessage::Incast(IncastMessage::IncastOn {
                src: 9,
                dst: 8,
                wscale: 2,
                mss: 1460,
            })),
        ];
        let text = serde_json::to_string(&msgs).unwrap();
        let back: Vec<ControlMessage> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, msgs);
    }

    #[test]
    fn only_a_rule_that_copies_tcp_flags_and_nothing_else_is_a_flags_copy() {
        let syn = FlowMod {
            switch: 0,
            command: FlowModCommand::Add,
            rule_match: RuleMatch {
                protocol: Some(ip_proto::TCP),
                flags_mask: 0x02,
                flags_value: 0x02,
                ..RuleMatch::default()
            },
            priority: 1000,
            actions: RuleActions {
                forward: Forward::Normal,
                set_ce: false,
                copy_to_controller: true,
            },
            hard_timeout: None,
        };
        assert_eq!(syn.tcp_flags_copy(), Some((0x02, 0x02)));
        let mut to_one_host = syn.clone();
        to_one_host.rule_match.dst = Some(7);
        let mut marking = syn.clone();
        marking.actions.set_ce = true;
        let mut dropping = syn.clone();
        dropping.actions.forward = Forward::Drop;
        let mut expiring = syn.clone();
        expiring.hard_timeout = Some(1_000_000);
        let mut every_tcp_packet = syn.clone();
        every_tcp_packet.rule_match.flags_mask = 0;
        every_tcp_packet.rule_match.flags_value = 0;
        for rule in [to_one_host, marking, dropping, expiring, every_tcp_packet] {
            assert_eq!(rule.tcp_flags_copy(), None, "{rule:?}");
        }
    }

    #[test]
    fn a_switch_stats_reply_costs_its_entries() {
        let reply = ControlMessage::StatsReply(StatsReply::Switch {
            switch: 0,
            ports: vec![
                PortSample {
                    switch: 0,
                    port: 0,
                    tx_bytes: 0
                };
                3
            ],
            flows: vec![],
        });
        assert_eq!(reply.wire_bytes(), 16 + 3 * 112);
        assert_eq!(reply.kind(), "stats_reply");
    }

    #[test]
    fn a_udp_packet_in_names_its_flow_with_its_ports_as_shims_and_ecmp_do() {
        let udp = PacketInHeaders {
            src: 1,
            dst: 2,
            protocol: 17,
            src_port: 10_000,
            dst_port: 9,
            tcp_flags: 0,
            mss: None,
            wscale: None,
        };
        assert_eq!(
            (udp.flow_key().src_port, udp.flow_key().dst_port),
            (10_000, 9)
        );
        let other = PacketInHeaders {
            protocol: 143,
            ..udp
        };
        assert_eq!(
            (other.flow_key().src_port, other.flow_key().dst_port),
            (0, 0)
        );
    }
}
