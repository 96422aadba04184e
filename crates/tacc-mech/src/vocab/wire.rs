//! The header fields of [`PacketHeaders`] on real bytes: an IPv4 packet, optionally carrying
//! TCP, with checksums kept valid across every rewrite.
//!
//! Rewrites patch the checksum incrementally (RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m')), which
//! is what a datapath does per packet; [`ipv4_header_checksum`] and [`tcp_checksum`] recompute
//! from scratch (RFC 1071) for building packets and for checking the incremental path.

use crate::vocab::control::PacketInHeaders;
use crate::vocab::headers::{ip_proto, Ecn, PacketHeaders};

const IPV4_MIN_HEADER: usize = 20;
const TCP_MIN_HEADER: usize = 20;
const IP_CHECKSUM: usize = 10;
const IP_FLAGS_FRAG: usize = 6;
const IP_RESERVED_FLAG: u16 = 0x8000;
const IP_FRAG_OFFSET_MASK: u16 = 0x1fff;
const TCP_WINDOW: usize = 14;
const TCP_CHECKSUM: usize = 16;

/// Why a byte buffer is not a packet this module can view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the headers it announces.
    Truncated,
    /// Not IPv4, or an IHL below 5 words.
    Malformed,
}

/// Adds 16-bit words in ones' complement arithmetic (end-around carry).
fn ones_add(a: u16, b: u16) -> u16 {
    let sum = a as u32 + b as u32;
    ((sum & 0xffff) + (sum >> 16)) as u16
}

/// Ones' complement sum of `data` as big-endian 16-bit words (odd length padded with zero),
/// folded into 16 bits, starting from `initial`.
fn ones_sum(initial: u16, data: &[u8]) -> u16 {
    let mut sum = initial as u64;
    let mut chunks = data.chunks_exact(2);
    for word in &mut chunks {
        sum += u16::from_be_bytes([word[0], word[1]]) as u64;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u64) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The Internet checksum of `data` (RFC 1071): the complement of the ones' complement sum.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !ones_sum(0, data)
}

/// The checksum a header with checksum `hc` must carry after one of its 16-bit words changes
/// from `old` to `new` (RFC 1624 eqn. 3). Unlike RFC 1141's HC + m + ~m', it never turns a
/// checksum that a full recomputation gives as 0x0000 into 0xFFFF.
pub fn update_checksum(hc: u16, old: u16, new: u16) -> u16 {
    !ones_add(ones_add(!hc, !old), new)
}

/// The IPv4 header checksum of `header` (the whole header, options included), computed as if
/// its checksum field were zero.
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let before = ones_sum(0, &header[..IP_CHECKSUM]);
    !ones_sum(before, &header[IP_CHECKSUM + 2..])
}

/// The TCP checksum of `segment` (header and payload) sent from `src` to `dst`, computed over
/// the pseudo-header and the segment as if its checksum field were zero.
pub fn tcp_checksum(src: u32, dst: u32, segment: &[u8]) -> u16 {
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src.to_be_bytes());
    pseudo[4..8].copy_from_slice(&dst.to_be_bytes());
    pseudo[9] = ip_proto::TCP;
    pseudo[10..12].copy_from_slice(&(segment.len() as u16).to_be_bytes());
    let sum = ones_sum(0, &pseudo);
    let sum = ones_sum(sum, &segment[..TCP_CHECKSUM]);
    !ones_sum(sum, &segment[TCP_CHECKSUM + 2..])
}

fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

fn write_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Rewrites the 16-bit word at `at` to `new` and patches the checksum at `checksum_at`.
fn rewrite_word(buf: &mut [u8], at: usize, new: u16, checksum_at: usize) {
    let old = read_u16(buf, at);
    if old == new {
        return;
    }
    write_u16(buf, at, new);
    let hc = read_u16(buf, checksum_at);
    write_u16(buf, checksum_at, update_checksum(hc, old, new));
}

/// A view of an IPv4 packet in a byte buffer (which may extend past the IPv4 total length).
#[derive(Clone, Debug)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl Ipv4Packet<Vec<u8>> {
    /// A copy of a packet's first bytes (a packet-in of its headers) read as a packet that
    /// ends where the copy does: its total length is lowered to the copy's. Its headers read as
    /// the packet's; it is never one to forward (its header checksum no longer holds).
    pub fn new_copy(mut bytes: Vec<u8>) -> Result<Ipv4Packet<Vec<u8>>, WireError> {
        if bytes.len() >= IPV4_MIN_HEADER && read_u16(&bytes, 2) as usize > bytes.len() {
            let copied = bytes.len() as u16; // below a u16 total length
            write_u16(&mut bytes, 2, copied);
        }
        Ipv4Packet::new_checked(bytes)
    }
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` after checking that it holds the IPv4 header and the total length it
    /// announces.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>, WireError> {
        let bytes = buffer.as_ref();
        if bytes.len() < IPV4_MIN_HEADER {
            return Err(WireError::Truncated);
        }
        let header_len = ((bytes[0] & 0x0f) as usize) * 4;
        if bytes[0] >> 4 != 4 || header_len < IPV4_MIN_HEADER {
            return Err(WireError::Malformed);
        }
        let total = read_u16(bytes, 2) as usize;
        if total < header_len {
            return Err(WireError::Malformed);
        }
        if bytes.len() < total {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IPv4 header length in bytes (IHL x 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[0] & 0x0f) as usize) * 4
    }

    pub fn src(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[12], b[13], b[14], b[15]])
    }

    pub fn dst(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[16], b[17], b[18], b[19]])
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    /// IPv4 total length in bytes.
    pub fn ip_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), 2)
    }

    pub fn ip_id(&self) -> u16 {
        read_u16(self.buffer.as_ref(), 4)
    }

    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buffer.as_ref()[1])
    }

    /// The IPv4 reserved flag (0x8000 of the flags/fragment word).
    pub fn reserved_bit(&self) -> bool {
        read_u16(self.buffer.as_ref(), IP_FLAGS_FRAG) & IP_RESERVED_FLAG != 0
    }

    pub fn tcp_ports(&self) -> Option<(u16, u16)> {
        let s = self.tcp_segment()?;
        Some((read_u16(s, 0), read_u16(s, 2)))
    }

    pub fn tcp_flags(&self) -> Option<u8> {
        self.tcp_segment().map(|s| s[13])
    }

    pub fn tcp_window(&self) -> Option<u16> {
        self.tcp_segment().map(|s| read_u16(s, TCP_WINDOW))
    }

    pub fn header_checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), IP_CHECKSUM)
    }

    /// The packet's bytes up to the IPv4 total length.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.ip_len() as usize]
    }

    /// Byte range of the TCP segment, if this is an unfragmented (first-fragment) TCP packet
    /// long enough to hold the TCP header it announces.
    fn tcp_range(&self) -> Option<std::ops::Range<usize>> {
        let bytes = self.buffer.as_ref();
        if bytes[9] != ip_proto::TCP || read_u16(bytes, IP_FLAGS_FRAG) & IP_FRAG_OFFSET_MASK != 0 {
            return None;
        }
        let start = self.header_len();
        let end = self.ip_len() as usize;
        if end < start + TCP_MIN_HEADER || ((bytes[start + 12] >> 4) as usize) * 4 > end - start {
            return None;
        }
        Some(start..end)
    }

    /// UDP source and destination ports, if this is an unfragmented UDP datagram.
    pub fn udp_ports(&self) -> Option<(u16, u16)> {
        let bytes = self.buffer.as_ref();
        if bytes[9] != ip_proto::UDP || read_u16(bytes, IP_FLAGS_FRAG) & IP_FRAG_OFFSET_MASK != 0 {
            return None;
        }
        let start = self.header_len();
        if (self.ip_len() as usize) < start + 8 {
            return None;
        }
        Some((read_u16(bytes, start), read_u16(bytes, start + 2)))
    }

    /// The MSS and window scale options of a TCP segment (what a SYN or SYN-ACK carries).
    /// Option parsing stops at the end-of-list option or at a malformed length.
    pub fn tcp_syn_options(&self) -> (Option<u16>, Option<u8>) {
        let (mut mss, mut wscale) = (None, None);
        let Some(seg) = self.tcp_segment() else {
            return (mss, wscale);
        };
        let options = &seg[TCP_MIN_HEADER..((seg[12] >> 4) as usize) * 4];
        let mut i = 0;
        while i < options.len() {
            match options[i] {
                0 => break,
                1 => i += 1,
                kind => {
                    let len = *options.get(i + 1).unwrap_or(&0) as usize;
                    if len < 2 || i + len > options.len() {
                        break;
                    }
                    match (kind, len) {
                        (2, 4) => mss = Some(read_u16(options, i + 2)),
                        (3, 3) => wscale = Some(options[i + 2]),
                        _ => {}
                    }
                    i += len;
                }
            }
        }
        (mss, wscale)
    }

    /// The headers a switch copies to the controller with a packet-in.
    pub fn packet_in_headers(&self) -> PacketInHeaders {
        let (src_port, dst_port) = self
            .tcp_ports()
            .or_else(|| self.udp_ports())
            .unwrap_or((0, 0));
        let (mss, wscale) = self.tcp_syn_options();
        PacketInHeaders {
            src: self.src(),
            dst: self.dst(),
            protocol: self.protocol(),
            src_port,
            dst_port,
            tcp_flags: self.tcp_flags().unwrap_or(0),
            mss,
            wscale,
        }
    }

    /// The TCP segment (header and payload), if any.
    pub fn tcp_segment(&self) -> Option<&[u8]> {
        self.tcp_range().map(|r| &self.buffer.as_ref()[r])
    }

    pub fn tcp_seq(&self) -> Option<u32> {
        let s = self.tcp_segment()?;
        Some(u32::from_be_bytes([s[4], s[5], s[6], s[7]]))
    }

    pub fn tcp_ack(&self) -> Option<u32> {
        let s = self.tcp_segment()?;
        Some(u32::from_be_bytes([s[8], s[9], s[10], s[11]]))
    }

    pub fn tcp_checksum_field(&self) -> Option<u16> {
        self.tcp_segment().map(|s| read_u16(s, TCP_CHECKSUM))
    }

    /// True if the IPv4 header checksum (and the TCP checksum, for TCP) verify.
    pub fn checksums_valid(&self) -> bool {
        let bytes = self.buffer.as_ref();
        if ipv4_header_checksum(&bytes[..self.header_len()]) != self.header_checksum() {
            return false;
        }
        match self.tcp_segment() {
            Some(seg) => tcp_checksum(self.src(), self.dst(), seg) == read_u16(seg, TCP_CHECKSUM),
            None => true,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes the IPv4 header checksum and, for TCP, the TCP checksum from scratch.
    pub fn fill_checksums(&mut self) {
        let header_len = self.header_len();
        let (src, dst) = (self.src(), self.dst());
        let tcp = self.tcp_range();
        let bytes = self.buffer.as_mut();
        let ip = ipv4_header_checksum(&bytes[..header_len]);
        write_u16(bytes, IP_CHECKSUM, ip);
        if let Some(r) = tcp {
            let sum = tcp_checksum(src, dst, &bytes[r.clone()]);
            write_u16(bytes, r.start + TCP_CHECKSUM, sum);
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PacketHeaders for Ipv4Packet<T> {
    fn src(&self) -> u32 {
        Ipv4Packet::src(self)
    }

    fn dst(&self) -> u32 {
        Ipv4Packet::dst(self)
    }

    fn protocol(&self) -> u8 {
        Ipv4Packet::protocol(self)
    }

    fn ip_len(&self) -> u16 {
        Ipv4Packet::ip_len(self)
    }

    fn ip_id(&self) -> u16 {
        Ipv4Packet::ip_id(self)
    }

    fn ecn(&self) -> Ecn {
        Ipv4Packet::ecn(self)
    }

    fn set_ecn(&mut self, ecn: Ecn) {
        let b = self.buffer.as_mut();
        let word = read_u16(b, 0);
        rewrite_word(b, 0, (word & !0b11) | ecn as u16, IP_CHECKSUM);
    }

    fn reserved_bit(&self) -> bool {
        Ipv4Packet::reserved_bit(self)
    }

    fn set_reserved_bit(&mut self, on: bool) {
        let b = self.buffer.as_mut();
        let word = read_u16(b, IP_FLAGS_FRAG);
        let new = if on {
            word | IP_RESERVED_FLAG
        } else {
            word & !IP_RESERVED_FLAG
        };
        rewrite_word(b, IP_FLAGS_FRAG, new, IP_CHECKSUM);
    }

    fn tcp_ports(&self) -> Option<(u16, u16)> {
        Ipv4Packet::tcp_ports(self)
    }

    fn udp_ports(&self) -> Option<(u16, u16)> {
        Ipv4Packet::udp_ports(self)
    }

    fn tcp_flags(&self) -> Option<u8> {
        Ipv4Packet::tcp_flags(self)
    }

    fn tcp_window(&self) -> Option<u16> {
        Ipv4Packet::tcp_window(self)
    }

    fn set_tcp_window(&mut self, window: u16) {
        if let Some(r) = self.tcp_range() {
            let b = self.buffer.as_mut();
            rewrite_word(b, r.start + TCP_WINDOW, window, r.start + TCP_CHECKSUM);
        }
    }
}

/// The IPv4 fields of a packet to build with [`emit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Fields {
    pub src: u32,
    pub dst: u32,
    pub protocol: u8,
    pub ident: u16,
    pub ecn: Ecn,
    /// IPv4 total length in bytes (header, TCP header and zero-filled payload).
    pub total_len: u16,
    pub ttl: u8,
}

/// The TCP fields of a packet to build with [`emit`] (a 20-byte header without options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFields {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

/// The transport header [`emit_transport`] writes after the IPv4 header.
#[derive(Clone, Copy, Debug)]
pub enum Transport<'a> {
    /// A TCP header followed by `options` (a multiple of 4 bytes, as [`tcp_options`] pads).
    Tcp(&'a TcpFields, &'a [u8]),
    /// A UDP header (source and destination ports) without a checksum (zero: none, which
    /// IPv4 allows).
    Udp(u16, u16),
    /// None: the payload follows the IPv4 header.
    None,
}

/// Builds an IPv4 packet (20-byte header, DF set) with an optional TCP header, a zero
/// payload up to `ip.total_len` and valid checksums. The TCP header is written only if it
/// fits in `total_len`.
pub fn emit(ip: &Ipv4Fields, tcp: Option<&TcpFields>) -> Vec<u8> {
    emit_transport(ip, tcp.map_or(Transport::None, |t| Transport::Tcp(t, &[])))
}

/// [`emit`] with any [`Transport`]: a header that does not fit in `ip.total_len` is left out.
pub fn emit_transport(ip: &Ipv4Fields, transport: Transport<'_>) -> Vec<u8> {
    let total = (ip.total_len as usize).max(IPV4_MIN_HEADER);
    let mut b = vec![0u8; total];
    b[0] = 0x45;
    b[1] = ip.ecn as u8;
    write_u16(&mut b, 2, total as u16);
    write_u16(&mut b, 4, ip.ident);
    write_u16(&mut b, IP_FLAGS_FRAG, 0x4000);
    b[8] = ip.ttl;
    b[9] = ip.protocol;
    b[12..16].copy_from_slice(&ip.src.to_be_bytes());
    b[16..20].copy_from_slice(&ip.dst.to_be_bytes());
    let room = total - IPV4_MIN_HEADER;
    let s = &mut b[IPV4_MIN_HEADER..];
    match transport {
        Transport::Tcp(t, options) if room >= TCP_MIN_HEADER + options.len() => {
            debug_assert_eq!(options.len() % 4, 0, "TCP options pad to a word");
            write_u16(s, 0, t.src_port);
            write_u16(s, 2, t.dst_port);
            s[4..8].copy_from_slice(&t.seq.to_be_bytes());
            s[8..12].copy_from_slice(&t.ack.to_be_bytes());
            s[12] = (((TCP_MIN_HEADER + options.len()) / 4) as u8) << 4;
            s[13] = t.flags;
            write_u16(s, TCP_WINDOW, t.window);
            s[TCP_MIN_HEADER..TCP_MIN_HEADER + options.len()].copy_from_slice(options);
        }
        Transport::Udp(src_port, dst_port) if room >= 8 => {
            write_u16(s, 0, src_port);
            write_u16(s, 2, dst_port);
            write_u16(s, 4, room as u16);
        }
        _ => {}
    }
    let mut pkt = Ipv4Packet { buffer: &mut b[..] };
    pkt.fill_checksums();
    b
}

/// TCP options as a sender writes them (RFC 9293 3.1, RFC 7323 2.2, RFC 2018 3): MSS and
/// window scale on a SYN, SACK blocks on an ACK, aligned with NOPs and padded to a word.
pub fn tcp_options(mss: Option<u16>, wscale: Option<u8>, sack: &[(u32, u32)]) -> Vec<u8> {
    let mut o = Vec::new();
    if let Some(mss) = mss {
        o.extend_from_slice(&[2, 4]);
        o.extend_from_slice(&mss.to_be_bytes());
    }
    if let Some(shift) = wscale {
        o.extend_from_slice(&[1, 3, 3, shift]);
    }
    if !sack.is_empty() {
        o.extend_from_slice(&[1, 1, 5, 2 + 8 * sack.len() as u8]);
        for &(left, right) in sack {
            o.extend_from_slice(&left.to_be_bytes());
            o.extend_from_slice(&right.to_be_bytes());
        }
    }
    o.resize(o.len().div_ceil(4) * 4, 1);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::headers::tcp_flags;

    fn ip(protocol: u8, total_len: u16) -> Ipv4Fields {
        Ipv4Fields {
            src: 0x0a00_0001,
            dst: 0x0a00_0002,
            protocol,
            ident: 0x1234,
            ecn: Ecn::Ce,
            total_len,
            ttl: 64,
        }
    }

    fn ack(window: u16) -> TcpFields {
        TcpFields {
            src_port: 5001,
            dst_port: 40000,
            seq: 1,
            ack: 1461,
            flags: tcp_flags::ACK,
            window,
        }
    }

    /// A tiny xorshift64 generator: deterministic pseudo-random test inputs without crates.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn rfc1071_example_sums_to_ddf2() {
        // RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2, checksum 220d.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
    }

    #[test]
    fn emitted_packets_verify_and_read_back() {
        let b = emit(&ip(ip_proto::TCP, 60), Some(&ack(1000)));
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.checksums_valid());
        assert_eq!(
            (p.src(), p.dst(), p.ip_len(), p.ip_id()),
            (0x0a00_0001, 0x0a00_0002, 60, 0x1234)
        );
        assert_eq!(p.ecn(), Ecn::Ce);
        assert_eq!(p.tcp_ports(), Some((5001, 40000)));
        assert_eq!(p.tcp_flags(), Some(tcp_flags::ACK));
        assert_eq!(p.tcp_window(), Some(1000));
        assert_eq!((p.tcp_seq(), p.tcp_ack()), (Some(1), Some(1461)));
    }

    #[test]
    fn options_and_udp_headers_are_emitted_as_a_receiver_reads_them() {
        let syn = tcp_options(Some(1460), Some(7), &[]);
        assert_eq!(syn, [2, 4, 0x05, 0xb4, 1, 3, 3, 7]);
        let b = emit_transport(&ip(ip_proto::TCP, 60), Transport::Tcp(&ack(100), &syn));
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.checksums_valid());
        assert_eq!(p.tcp_syn_options(), (Some(1460), Some(7)));
        assert_eq!(p.tcp_window(), Some(100));
        // Two SACK blocks: NOP, NOP, kind 5, length 18, then the edges; 20 bytes in all.
        let sack = tcp_options(None, None, &[(10, 20), (30, 40)]);
        assert_eq!(sack.len(), 20);
        assert_eq!(&sack[..4], &[1, 1, 5, 18]);
        assert_eq!(&sack[12..16], &30u32.to_be_bytes());
        // Options that do not fit leave the TCP header out, as a TCP header does.
        let short = emit_transport(&ip(ip_proto::TCP, 40), Transport::Tcp(&ack(1), &sack));
        assert!(short[20..36].iter().all(|&x| x == 0));
        let u = emit_transport(&ip(ip_proto::UDP, 1000), Transport::Udp(7, 9));
        let p = Ipv4Packet::new_checked(&u[..]).unwrap();
        assert!(p.checksums_valid());
        assert_eq!((p.udp_ports(), read_u16(&u, 24)), (Some((7, 9)), 980));
    }

    #[test]
    fn a_syn_gives_its_mss_and_window_scale_to_a_packet_in() {
        // A Linux SYN's options: MSS 1460, SACK permitted, timestamps, NOP, window scale 7.
        let options = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let mut b = emit(&ip(ip_proto::TCP, 60), Some(&ack(64240)));
        b[32] = 10 << 4;
        b[33] = tcp_flags::SYN;
        b[40..60].copy_from_slice(&options);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.tcp_syn_options(), (Some(1460), Some(7)));
        let h = p.packet_in_headers();
        assert_eq!(
            (h.src_port, h.dst_port, h.tcp_flags),
            (5001, 40000, tcp_flags::SYN)
        );
        assert_eq!((h.mss, h.wscale), (Some(1460), Some(7)));
        // A bad option length ends the parse without reading past the header.
        b[41] = 40;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.tcp_syn_options(), (None, None));
        // No options at all.
        let plain = emit(&ip(ip_proto::TCP, 40), Some(&ack(1)));
        let p = Ipv4Packet::new_checked(&plain[..]).unwrap();
        assert_eq!(p.tcp_syn_options(), (None, None));
    }

    #[test]
    fn a_udp_datagram_gives_its_ports_and_no_tcp_fields() {
        let mut b = emit(&ip(ip_proto::UDP, 28), None);
        b[20..22].copy_from_slice(&10_000u16.to_be_bytes());
        b[22..24].copy_from_slice(&9u16.to_be_bytes());
        let p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.udp_ports(), Some((10_000, 9)));
        assert_eq!((p.tcp_ports(), p.tcp_flags()), (None, None));
        assert_eq!(crate::vocab::headers::FlowKey::of(&p).src_port, 10_000);
        // Too short for a UDP header: no ports.
        let short = emit(&ip(ip_proto::UDP, 24), None);
        assert_eq!(
            Ipv4Packet::new_checked(&short[..]).unwrap().udp_ports(),
            None
        );
    }

    #[test]
    fn a_copy_of_the_headers_of_a_data_segment_reads_as_that_segment() {
        // The last segment of a flow, 1460 B of data with its FIN: a port copies 52 B of it
        // (IPv4, TCP with timestamps).
        let mut b = emit(&ip(ip_proto::TCP, 1512), Some(&ack(501)));
        b[32] = 8 << 4;
        b[33] = tcp_flags::FIN | tcp_flags::ACK;
        let copy = b[..52].to_vec();
        assert_eq!(
            Ipv4Packet::new_checked(&copy[..]).unwrap_err(),
            WireError::Truncated
        );
        let p = Ipv4Packet::new_copy(copy).unwrap();
        let h = p.packet_in_headers();
        assert_eq!(
            (h.src, h.dst, h.src_port, h.dst_port, h.tcp_flags),
            (
                0x0a00_0001,
                0x0a00_0002,
                5001,
                40000,
                tcp_flags::FIN | tcp_flags::ACK
            )
        );
        // A copy cut inside the TCP header has no TCP fields, and one inside the IPv4 header
        // is refused.
        let cut = Ipv4Packet::new_copy(b[..30].to_vec()).unwrap();
        assert_eq!((cut.tcp_ports(), cut.tcp_flags()), (None, None));
        assert_eq!(
            Ipv4Packet::new_copy(b[..12].to_vec()).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn truncated_or_foreign_buffers_are_refused() {
        let b = emit(&ip(ip_proto::UDP, 40), None);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..30]).unwrap_err(),
            WireError::Truncated
        );
        let mut v6 = b.clone();
        v6[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&v6[..]).unwrap_err(),
            WireError::Malformed
        );
    }

    #[test]
    fn clearing_ce_rewrites_exactly_the_tos_byte_and_checksum() {
        let mut b = emit(&ip(ip_proto::UDP, 28), None);
        let before = b.clone();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_ecn(Ecn::Ect0);
        assert!(p.checksums_valid());
        // TOS 0x03 -> 0x02: the word 0x4503 becomes 0x4502, so the checksum grows by one.
        let expect = u16::from_be_bytes([before[10], before[11]]) + 1;
        assert_eq!(b[1], 0x02);
        assert_eq!(u16::from_be_bytes([b[10], b[11]]), expect);
        let changed: Vec<usize> = (0..b.len()).filter(|&i| b[i] != before[i]).collect();
        assert_eq!(changed, vec![1, 11]);
    }

    #[test]
    fn the_ipr_bit_is_0x8000_of_the_flags_word() {
        let mut b = emit(&ip(ip_proto::UDP, 28), None);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert!(!p.reserved_bit());
        p.set_reserved_bit(true);
        assert!(p.reserved_bit() && p.checksums_valid());
        assert_eq!(
            &b[6..8],
            &[0xc0, 0x00],
            "DF stays set next to the reserved bit"
        );
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_reserved_bit(false);
        assert!(!p.reserved_bit() && p.checksums_valid());
        assert_eq!(&b[6..8], &[0x40, 0x00]);
    }

    #[test]
    fn clamping_rwnd_rewrites_the_window_and_tcp_checksum_only() {
        let mut b = emit(&ip(ip_proto::TCP, 40), Some(&ack(65535)));
        let before = b.clone();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_tcp_window(11);
        assert_eq!(p.tcp_window(), Some(11));
        assert!(p.checksums_valid());
        let changed: Vec<usize> = (0..b.len()).filter(|&i| b[i] != before[i]).collect();
        assert!(
            changed.iter().all(|i| (34..38).contains(i)),
            "window and checksum only: {changed:?}"
        );
        assert_eq!(&b[34..36], &[0x00, 0x0b]);
    }

    #[test]
    fn options_in_the_ip_header_move_the_tcp_header() {
        let mut b = emit(&ip(ip_proto::TCP, 40), Some(&ack(500)));
        // Insert one 4-byte option (four NOPs) and fix IHL and the total length.
        b.splice(20..20, [1u8, 1, 1, 1]);
        b[0] = 0x46;
        write_u16(&mut b, 2, 44);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksums();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.tcp_window(), Some(500));
        p.set_tcp_window(100);
        assert!(p.checksums_valid());
        assert_eq!(&b[38..40], &[0x00, 0x64]);
    }

    #[test]
    fn non_tcp_packets_have_no_tcp_fields_and_ignore_window_writes() {
        let mut b = emit(&ip(ip_proto::UDP, 40), None);
        let before = b.clone();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(
            (p.tcp_ports(), p.tcp_flags(), p.tcp_window()),
            (None, None, None)
        );
        p.set_tcp_window(1);
        assert_eq!(b, before);
    }

    /// RFC 1141's incremental update, which RFC 1624 replaced.
    fn rfc1141_update(hc: u16, old: u16, new: u16) -> u16 {
        ones_add(ones_add(hc, old), !new)
    }

    #[test]
    fn rfc1624_update_keeps_a_zero_checksum_where_rfc1141_yields_ffff() {
        // RFC 1624 §3: the other words sum to 0xCD7A and the field goes 0x5555 -> 0x3285, so
        // the new sum is 0xFFFF and a full recomputation gives the checksum 0x0000.
        let (old, new) = (0x5555u16, 0x3285u16);
        let others = 0xcd7a;
        let hc = !ones_add(others, old);
        assert_eq!(update_checksum(hc, old, new), 0x0000);
        assert_eq!(rfc1141_update(hc, old, new), 0xffff);
    }

    fn random_packet(rng: &mut XorShift) -> Vec<u8> {
        let r = rng.next();
        let payload = (r % 64) as u16;
        let flags = (r >> 8) as u8;
        let mut b = emit(
            &Ipv4Fields {
                src: (r >> 16) as u32,
                dst: rng.next() as u32,
                protocol: ip_proto::TCP,
                ident: (r >> 48) as u16,
                ecn: Ecn::from_bits((r >> 6) as u8),
                total_len: 40 + payload,
                ttl: (r >> 40) as u8,
            },
            Some(&TcpFields {
                src_port: rng.next() as u16,
                dst_port: rng.next() as u16,
                seq: rng.next() as u32,
                ack: rng.next() as u32,
                flags,
                window: rng.next() as u16,
            }),
        );
        for byte in &mut b[40..] {
            *byte = rng.next() as u8;
        }
        if r & (1 << 5) != 0 {
            b[6] |= 0x80;
        }
        Ipv4Packet::new_checked(&mut b[..])
            .unwrap()
            .fill_checksums();
        b
    }

    /// Chooses the IP ID (resp. the TCP sequence number's low word) so that the IPv4 (resp.
    /// TCP) checksum comes out as 0x0000 after a full recomputation: the RFC 1624 corner case.
    fn force_zero_checksums(b: &mut [u8]) {
        write_u16(b, 4, 0);
        write_u16(b, 10, 0);
        let hc = ipv4_header_checksum(&b[..20]);
        // Adding !hc (= the sum) complement brings the sum to 0xFFFF.
        write_u16(b, 4, hc);
        write_u16(b, 26, 0);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksums();
        let tc = p.tcp_checksum_field().unwrap();
        write_u16(b, 26, tc);
        Ipv4Packet::new_checked(&mut b[..])
            .unwrap()
            .fill_checksums();
    }

    #[test]
    fn incremental_checksums_equal_full_recomputation_on_random_headers() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut zero_ip = 0;
        let mut zero_tcp = 0;
        for i in 0..5000 {
            let mut b = random_packet(&mut rng);
            if i % 4 == 0 {
                force_zero_checksums(&mut b);
            }
            let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            assert!(p.checksums_valid());
            zero_ip += (p.header_checksum() == 0) as u32;
            zero_tcp += (p.tcp_checksum_field() == Some(0)) as u32;
            let r = rng.next();
            p.set_ecn(Ecn::from_bits(r as u8));
            assert!(p.checksums_valid(), "ecn rewrite, case {i}");
            p.set_reserved_bit(r & 4 != 0);
            assert!(p.checksums_valid(), "reserved bit rewrite, case {i}");
            p.set_tcp_window((r >> 16) as u16);
            assert!(p.checksums_valid(), "window rewrite, case {i}");
            assert_eq!(p.tcp_window(), Some((r >> 16) as u16));
            zero_ip += (p.header_checksum() == 0) as u32;
            zero_tcp += (p.tcp_checksum_field() == Some(0)) as u32;
        }
        assert!(
            zero_ip >= 1000 && zero_tcp >= 1000,
            "corner case covered: {zero_ip} {zero_tcp}"
        );
    }
}
