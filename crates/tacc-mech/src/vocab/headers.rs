//! The packet header fields the mechanisms read and write.

/// The two-bit ECN field of the IPv4 header (RFC 3168).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Ecn {
    NotEct = 0b00,
    Ect1 = 0b01,
    Ect0 = 0b10,
    Ce = 0b11,
}

impl Ecn {
    pub fn from_bits(bits: u8) -> Ecn {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    pub fn is_ect(self) -> bool {
        self != Ecn::NotEct
    }
}

/// TCP flag bits as they sit in the 13th/14th header bytes (low byte: CWR ECE URG ACK PSH RST SYN FIN).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// IP protocol numbers used by tacc.
pub mod ip_proto {
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    /// Unassigned protocol number used for HyGenICC/SDN-GCC congestion feedback packets.
    pub const FEEDBACK: u8 = 143;
}

/// Read/write access to the header fields of one IPv4 packet.
///
/// Implementations keep checksums consistent: every setter that changes a covered field
/// updates the IPv4 header checksum and/or the TCP checksum incrementally (RFC 1624).
pub trait PacketHeaders {
    fn src(&self) -> u32;
    fn dst(&self) -> u32;
    fn protocol(&self) -> u8;
    /// IPv4 total length in bytes.
    fn ip_len(&self) -> u16;
    fn ip_id(&self) -> u16;
    fn ecn(&self) -> Ecn;
    fn set_ecn(&mut self, ecn: Ecn);
    /// The IPv4 reserved flag bit (0x8000 of the flags/fragment word), HyGenICC's "IPR" bit.
    fn reserved_bit(&self) -> bool;
    fn set_reserved_bit(&mut self, on: bool);
    /// TCP source and destination ports, `None` for non-TCP packets.
    fn tcp_ports(&self) -> Option<(u16, u16)>;
    /// UDP source and destination ports, `None` for non-UDP packets.
    fn udp_ports(&self) -> Option<(u16, u16)>;
    /// TCP flag byte, `None` for non-TCP packets.
    fn tcp_flags(&self) -> Option<u8>;
    /// The raw 16-bit TCP window field, `None` for non-TCP packets.
    fn tcp_window(&self) -> Option<u16>;
    /// Rewrites the TCP window field and the TCP checksum; no-op for non-TCP packets.
    fn set_tcp_window(&mut self, window: u16);
}

/// The 5-tuple that names a transport flow (ports are zero for protocols without them): what
/// the switches' ECMP hashes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct FlowKey {
    pub src: u32,
    pub dst: u32,
    pub src_port: u16,
    pub dst_port: u16,
    pub protocol: u8,
}

impl FlowKey {
    /// The flow a packet belongs to.
    pub fn of(pkt: &(impl PacketHeaders + ?Sized)) -> FlowKey {
        let (src_port, dst_port) = pkt
            .tcp_ports()
            .or_else(|| pkt.udp_ports())
            .unwrap_or((0, 0));
        FlowKey {
            src: pkt.src(),
            dst: pkt.dst(),
            src_port,
            dst_port,
            protocol: pkt.protocol(),
        }
    }

    /// A 32-bit identifier of the flow (FNV-1a over the 5-tuple). A flow follows one ECMP path,
    /// so a shim can key a rate per path by it without knowing the switches' hash functions.
    pub fn id(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        let bytes = [
            &self.src.to_be_bytes()[..],
            &self.dst.to_be_bytes()[..],
            &self.src_port.to_be_bytes()[..],
            &self.dst_port.to_be_bytes()[..],
            &[self.protocol][..],
        ];
        for b in bytes.iter().flat_map(|s| s.iter()) {
            h = (h ^ *b as u32).wrapping_mul(0x0100_0193);
        }
        h
    }

    /// The same flow seen from the other end (the key its ACKs carry).
    pub fn reversed(self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }
}
