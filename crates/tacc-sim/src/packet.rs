//! Packets: the header fields mechanisms read and write, plus the simulator's own metadata.
//!
//! Payload bytes are not materialised; `payload()` is their count. The TCP checksum covers the
//! pseudo-header and the 20-byte base TCP header with an all-zero payload, so that a header
//! rewrite that forgets to update it is caught when the end host verifies it (debug builds).

use tacc_mech::headers::{ip_proto, Ecn, PacketHeaders};
pub use tacc_mech::plan::flow_hash;
use tacc_mech::wire::{self, update_checksum, Ipv4Fields, Ipv4Packet, TcpFields, Transport};

pub const IP_HEADER: u32 = 20;
pub const TCP_HEADER: u32 = 20;
pub const UDP_HEADER: u32 = 8;
/// Size of the explicit feedback packets of HyGenICC/SDN-GCC (Ethernet + IPv4 + 2 B).
pub const FEEDBACK_PACKET: u32 = 36;
/// The smallest packet a run sends: HyGenICC's feedback packet, below a TCP segment with no
/// payload and no options (40 B; UDP packets are 64 B at the least).
pub const MIN_PACKET: u32 = if FEEDBACK_PACKET < IP_HEADER + TCP_HEADER {
    FEEDBACK_PACKET
} else {
    IP_HEADER + TCP_HEADER
};

pub type PktId = u32;
/// "No endpoint": packets that end at a shim (feedback) rather than in a VM.
pub const NO_EP: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub struct Sack {
    /// Up to three SACK blocks (start, end) in sequence-number space, most recent first.
    pub blocks: [(u32, u32); 3],
    pub len: u8,
}

/// Laid out by hand (`repr(C)`) in one 64-byte line: the arena's packets then each fill one
/// line, and what a switch reads (the ECMP 5-tuple, the length and the ECN field) is in the
/// first 16 bytes. As 76 bytes every packet spanned two lines, and a switch's fields one in
/// four. The payload's size follows from the length, and the SYN options and SACK blocks
/// are kept without `Option`'s padding.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Packet {
    // IPv4
    pub src: u32,
    pub dst: u32,
    /// IPv4 total length in bytes (what a link serializes).
    pub len: u16,
    // TCP / UDP
    pub sport: u16,
    pub dport: u16,
    pub protocol: u8,
    pub ecn: Ecn,
    pub flags: u8,
    pub reserved_bit: bool,
    pub window: u16,
    pub seq: u32,
    pub ack: u32,
    // simulator metadata
    /// Endpoint at the destination host that receives this packet.
    pub dst_ep: u32,
    pub tcp_checksum: u16,
    pub ip_id: u16,
    /// MSS option (SYN, SYN-ACK only), `NO_MSS` when absent.
    mss: u16,
    /// Window scale option (SYN, SYN-ACK only), `NO_WSCALE` when absent.
    wscale: u8,
    sack_len: u8,
    sack_blocks: [(u32, u32); 3],
}

/// No MSS option (an MSS of 0 cannot be announced).
const NO_MSS: u16 = 0;
/// No window-scale option (RFC 7323 caps the shift at 14).
const NO_WSCALE: u8 = u8::MAX;

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Packet, ecn) < 16 && offset_of!(Packet, protocol) < 16);
    assert!(offset_of!(Packet, dport) < 16 && size_of::<Packet>() == 64);
};

impl Packet {
    /// Panics if `len` is more than an IPv4 packet can be (scenarios are validated for it).
    pub fn new(src: u32, dst: u32, protocol: u8, len: u32) -> Packet {
        Packet {
            src,
            dst,
            protocol,
            ecn: Ecn::NotEct,
            reserved_bit: false,
            ip_id: 0,
            len: u16::try_from(len).expect("an IPv4 packet of at most 65535 bytes"),
            sport: 0,
            dport: 0,
            seq: 0,
            ack: 0,
            flags: 0,
            window: 0,
            tcp_checksum: 0,
            wscale: NO_WSCALE,
            mss: NO_MSS,
            sack_len: 0,
            sack_blocks: [(0, 0); 3],
            dst_ep: NO_EP,
        }
    }

    /// Application bytes carried: what follows the TCP header, or a UDP one (what a forged
    /// feedback packet of a UDP flow carries too).
    pub fn payload(&self) -> u32 {
        let header = IP_HEADER
            + if self.is_tcp() {
                TCP_HEADER
            } else {
                UDP_HEADER
            };
        (self.len as u32).saturating_sub(header)
    }

    /// The MSS option, if the segment carries one.
    pub fn mss(&self) -> Option<u16> {
        (self.mss != NO_MSS).then_some(self.mss)
    }

    /// The window-scale option, if the segment carries one.
    pub fn wscale(&self) -> Option<u8> {
        (self.wscale != NO_WSCALE).then_some(self.wscale)
    }

    /// Sets a SYN's options: an MSS (at least 1) and a window-scale shift (at most 14).
    pub fn set_syn_options(&mut self, mss: u16, wscale: u8) {
        debug_assert!(mss != NO_MSS && wscale <= 14);
        (self.mss, self.wscale) = (mss, wscale);
    }

    /// The SACK blocks carried, most recent first.
    pub fn sack_blocks(&self) -> &[(u32, u32)] {
        &self.sack_blocks[..self.sack_len as usize]
    }

    pub fn set_sack(&mut self, sack: &Sack) {
        (self.sack_blocks, self.sack_len) = (sack.blocks, sack.len);
    }

    pub fn is_tcp(&self) -> bool {
        self.protocol == ip_proto::TCP
    }

    /// The packet as bytes on a wire (`tacc_mech::wire`), for a capture: its header fields
    /// (ECN, the reserved bit, IP ID, ports, sequence numbers, flags, window), a TCP
    /// segment's options (MSS and window scale on a SYN, SACK blocks), a zero payload and
    /// valid checksums. The engine charges a TCP header as 20 bytes: the options are written
    /// beyond the packet's simulated length. TTL, which nothing models, is 64.
    pub fn to_wire(&self) -> Vec<u8> {
        let tcp = TcpFields {
            src_port: self.sport,
            dst_port: self.dport,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            window: self.window,
        };
        let options = match self.protocol {
            ip_proto::TCP => wire::tcp_options(self.mss(), self.wscale(), self.sack_blocks()),
            _ => Vec::new(),
        };
        let transport = match self.protocol {
            ip_proto::TCP => Transport::Tcp(&tcp, &options),
            ip_proto::UDP => Transport::Udp(self.sport, self.dport),
            _ => Transport::None,
        };
        let ip = Ipv4Fields {
            src: self.src,
            dst: self.dst,
            protocol: self.protocol,
            ident: self.ip_id,
            ecn: self.ecn,
            total_len: self.len.saturating_add(options.len() as u16),
            ttl: 64,
        };
        let mut bytes = wire::emit_transport(&ip, transport);
        if self.reserved_bit {
            Ipv4Packet::new_checked(&mut bytes[..])
                .expect("emitted whole")
                .set_reserved_bit(true);
        }
        bytes
    }

    /// The TCP checksum (RFC 793) over the pseudo-header and base header, zero payload.
    pub fn compute_tcp_checksum(&self) -> u16 {
        let tcp_len = self.len as u32 - IP_HEADER;
        // The 16-bit words summed as 32-bit pairs: 2^16 = 1 modulo 0xffff, and the sum is never
        // zero (the protocol word), so it folds to the same one's-complement sum. The checksum
        // field and the urgent pointer are zero.
        let mut sum = self.src as u64
            + self.dst as u64
            + ((ip_proto::TCP as u64) << 16 | (tcp_len & 0xffff) as u64)
            + ((self.sport as u64) << 16 | self.dport as u64)
            + self.seq as u64
            + self.ack as u64
            + (((5 << 12) | self.flags as u64) << 16 | self.window as u64);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    pub fn fill_tcp_checksum(&mut self) {
        self.tcp_checksum = self.compute_tcp_checksum();
    }

    pub fn tcp_checksum_ok(&self) -> bool {
        !self.is_tcp() || self.compute_tcp_checksum() == self.tcp_checksum
    }

    /// 5-tuple hash for ECMP; `salt` differs per switch so paths decorrelate across tiers.
    #[inline]
    pub fn flow_hash(&self, salt: u64) -> u64 {
        flow_hash(
            salt,
            self.src,
            self.dst,
            self.protocol,
            self.sport,
            self.dport,
        )
    }
}

impl PacketHeaders for Packet {
    fn src(&self) -> u32 {
        self.src
    }
    fn dst(&self) -> u32 {
        self.dst
    }
    fn protocol(&self) -> u8 {
        self.protocol
    }
    fn ip_len(&self) -> u16 {
        self.len
    }
    fn ip_id(&self) -> u16 {
        self.ip_id
    }
    fn ecn(&self) -> Ecn {
        self.ecn
    }
    fn set_ecn(&mut self, ecn: Ecn) {
        self.ecn = ecn;
    }
    fn reserved_bit(&self) -> bool {
        self.reserved_bit
    }
    fn set_reserved_bit(&mut self, on: bool) {
        self.reserved_bit = on;
    }
    fn tcp_ports(&self) -> Option<(u16, u16)> {
        self.is_tcp().then_some((self.sport, self.dport))
    }
    fn udp_ports(&self) -> Option<(u16, u16)> {
        (self.protocol == ip_proto::UDP).then_some((self.sport, self.dport))
    }
    fn tcp_flags(&self) -> Option<u8> {
        self.is_tcp().then_some(self.flags)
    }
    fn tcp_window(&self) -> Option<u16> {
        self.is_tcp().then_some(self.window)
    }
    fn set_tcp_window(&mut self, window: u16) {
        if self.is_tcp() {
            self.tcp_checksum = update_checksum(self.tcp_checksum, self.window, window);
            self.window = window;
        }
    }
}

/// Packet storage with a free list: the per-packet path allocates no heap memory once warm.
#[derive(Default)]
pub struct Arena {
    slots: Vec<Packet>,
    free: Vec<PktId>,
}

impl Arena {
    pub fn alloc(&mut self, p: Packet) -> PktId {
        if let Some(id) = self.free.pop() {
            self.slots[id as usize] = p;
            id
        } else {
            self.slots.push(p);
            (self.slots.len() - 1) as PktId
        }
    }
    pub fn free(&mut self, id: PktId) {
        self.free.push(id);
    }
    pub fn live(&self) -> u64 {
        (self.slots.len() - self.free.len()) as u64
    }
    /// Where packet `id` is (for a prefetch: not checked against the arena's length).
    #[inline]
    pub fn as_ptr(&self, id: PktId) -> *const Packet {
        self.slots.as_ptr().wrapping_add(id as usize)
    }
    /// Packet `id`, if the arena has a slot `id` (for a prefetch: it may be free).
    #[inline]
    pub fn try_get(&self, id: PktId) -> Option<&Packet> {
        self.slots.get(id as usize)
    }
    #[inline]
    pub fn get(&self, id: PktId) -> &Packet {
        &self.slots[id as usize]
    }
    #[inline]
    pub fn get_mut(&mut self, id: PktId) -> &mut Packet {
        &mut self.slots[id as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_the_sum_of_16_bit_words() {
        let mut p = Packet::new(0xfffe_fffd, 0x0a00_0002, ip_proto::TCP, 1500);
        for (seq, ack, flags, window) in [
            (0, 0, 0, 0),
            (0xffff_ffff, 0xffff_ffff, 0xff, 0xffff),
            (0xdead_beef, 12345, 0x12, 1460),
        ] {
            (p.seq, p.ack, p.flags, p.window, p.sport, p.dport) = (seq, ack, flags, window, 80, 9);
            let words = [
                p.src >> 16,
                p.src & 0xffff,
                p.dst >> 16,
                p.dst & 0xffff,
                ip_proto::TCP as u32,
                p.len as u32 - IP_HEADER,
                p.sport as u32,
                p.dport as u32,
                p.seq >> 16,
                p.seq & 0xffff,
                p.ack >> 16,
                p.ack & 0xffff,
                (5 << 12) | p.flags as u32,
                p.window as u32,
            ];
            let mut sum: u32 = words.iter().sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            assert_eq!(p.compute_tcp_checksum(), !(sum as u16));
        }
    }

    #[test]
    fn window_rewrite_keeps_checksum_valid() {
        let mut p = Packet::new(0x0a00_0001, 0x0a00_0002, ip_proto::TCP, 40);
        p.seq = 0xdead_beef;
        p.ack = 12345;
        p.flags = 0x10;
        p.window = 65535;
        p.fill_tcp_checksum();
        for w in [0u16, 11, 1460, 0xffff, 1] {
            p.set_tcp_window(w);
            assert_eq!(p.tcp_checksum, p.compute_tcp_checksum(), "window {w}");
        }
    }

    #[test]
    fn on_the_wire_a_packet_carries_its_fields_and_the_engines_checksum() {
        let mut p = Packet::new(0x0a00_0001, 0x0a00_0002, ip_proto::TCP, 1500);
        (p.sport, p.dport, p.seq, p.ack) = (10_000, 5001, 0xdead_beef, 77);
        (p.flags, p.window, p.ip_id, p.ecn) = (0x18, 1460, 9, Ecn::Ce);
        p.reserved_bit = true;
        p.fill_tcp_checksum();
        let b = p.to_wire();
        let w = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(w.checksums_valid());
        assert_eq!(
            (w.ip_len(), w.ip_id(), w.ecn(), w.reserved_bit()),
            (1500, 9, Ecn::Ce, true)
        );
        assert_eq!(
            (w.tcp_seq(), w.tcp_ack(), w.tcp_window()),
            (Some(0xdead_beef), Some(77), Some(1460))
        );
        // Without options, the checksum the engine keeps is the one on the wire.
        assert_eq!(w.tcp_checksum_field(), Some(p.tcp_checksum));

        let mut ack = Packet::new(0x0a00_0002, 0x0a00_0001, ip_proto::TCP, 40);
        ack.set_sack(&Sack {
            blocks: [(100, 200), (300, 400), (0, 0)],
            len: 2,
        });
        let b = ack.to_wire();
        let w = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(w.checksums_valid());
        assert_eq!(w.ip_len(), 60); // 40 charged, 20 of SACK options beyond
        assert_eq!(&b[40..44], &[1, 1, 5, 18]);

        let mut syn = Packet::new(0x0a00_0001, 0x0a00_0002, ip_proto::TCP, 40);
        syn.set_syn_options(1460, 9);
        let b = syn.to_wire();
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap().tcp_syn_options(),
            (Some(1460), Some(9))
        );

        let mut udp = Packet::new(0x0a00_0001, 0x0a00_0002, ip_proto::UDP, 1000);
        (udp.sport, udp.dport) = (10_001, 9);
        let b = udp.to_wire();
        let w = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((w.ip_len(), w.udp_ports()), (1000, Some((10_001, 9))));
    }
}
