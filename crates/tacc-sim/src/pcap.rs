//! Packet captures: a pcapng writer (one section, interfaces named after ports, nanosecond
//! timestamps, a comment per packet where there is something to say) and a reader of
//! classic pcap files, for turning tcpdump's captures of testbed ports into the same format.
//!
//! pcapng as in draft-ietf-opsawg-pcapng (section header, interface description and
//! enhanced packet blocks, little-endian); classic pcap as libpcap writes it (either byte
//! order, microsecond or nanosecond timestamps).

use std::io::{self, Write};

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;

/// LINKTYPE_RAW: each packet begins with its IPv4 header.
pub const LINKTYPE_RAW: u16 = 101;
/// LINKTYPE_ETHERNET: each packet begins with an Ethernet header.
pub const LINKTYPE_ETHERNET: u16 = 1;

/// Writes a pcapng stream to `out`, block by block.
pub struct PcapngWriter<W: Write> {
    out: W,
    snaplens: Vec<u32>,
}

impl<W: Write> PcapngWriter<W> {
    /// Starts the stream with its section header, naming the application that wrote it.
    pub fn new(mut out: W, application: &str) -> io::Result<PcapngWriter<W>> {
        let mut body = Vec::new();
        body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes()); // section length not given
        option(&mut body, SHB_USERAPPL, application.as_bytes());
        option(&mut body, OPT_END, &[]);
        block(&mut out, SHB, &body)?;
        Ok(PcapngWriter {
            out,
            snaplens: Vec::new(),
        })
    }

    /// Describes an interface (a port): its packets keep at most `snaplen` bytes each.
    /// Returns its number for [`PcapngWriter::packet`].
    pub fn interface(&mut self, name: &str, linktype: u16, snaplen: u32) -> io::Result<u32> {
        let mut body = Vec::new();
        body.extend_from_slice(&linktype.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&snaplen.to_le_bytes());
        option(&mut body, IF_NAME, name.as_bytes());
        option(&mut body, IF_TSRESOL, &[9]); // 10^-9 s
        option(&mut body, OPT_END, &[]);
        block(&mut self.out, IDB, &body)?;
        self.snaplens.push(snaplen);
        Ok(self.snaplens.len() as u32 - 1)
    }

    /// One packet of `interface` at `ts_ns`, `wire_len` bytes long, of which `data` was
    /// kept; the interface's snap length of it is written.
    pub fn packet(
        &mut self,
        interface: u32,
        ts_ns: u64,
        data: &[u8],
        wire_len: usize,
        comment: Option<&str>,
    ) -> io::Result<()> {
        let kept = &data[..data.len().min(self.snaplens[interface as usize] as usize)];
        let mut body = Vec::with_capacity(32 + kept.len());
        body.extend_from_slice(&interface.to_le_bytes());
        body.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ts_ns as u32).to_le_bytes());
        body.extend_from_slice(&(kept.len() as u32).to_le_bytes());
        body.extend_from_slice(&(wire_len.max(kept.len()) as u32).to_le_bytes());
        body.extend_from_slice(kept);
        pad(&mut body);
        if let Some(c) = comment {
            option(&mut body, OPT_COMMENT, c.as_bytes());
            option(&mut body, OPT_END, &[]);
        }
        block(&mut self.out, EPB, &body)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn pad(b: &mut Vec<u8>) {
    b.resize(b.len().div_ceil(4) * 4, 0);
}

fn option(b: &mut Vec<u8>, code: u16, value: &[u8]) {
    b.extend_from_slice(&code.to_le_bytes());
    b.extend_from_slice(&(value.len() as u16).to_le_bytes());
    b.extend_from_slice(value);
    pad(b);
}

fn block(out: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    out.write_all(&kind.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&total.to_le_bytes())
}

/// A classic pcap file's packets: its link type, then (timestamp in ns, original length,
/// the bytes kept) per packet.
pub struct Pcap {
    pub linktype: u16,
    pub packets: Vec<(u64, u32, Vec<u8>)>,
    /// The file ends inside a packet's record (its writer was stopped mid-write): the
    /// packets before it are whole.
    pub cut_short: bool,
}

/// Reads a classic pcap file (as tcpdump writes it).
pub fn read_pcap(bytes: &[u8]) -> Result<Pcap, String> {
    let magic = bytes
        .get(..4)
        .map(|m| u32::from_le_bytes(m.try_into().expect("4 bytes")))
        .ok_or("shorter than a pcap file header")?;
    let (big_endian, ns) = match magic {
        0xa1b2_c3d4 => (false, false),
        0xa1b2_3c4d => (false, true),
        0xd4c3_b2a1 => (true, false),
        0x4d3c_b2a1 => (true, true),
        m => return Err(format!("not a pcap file (magic {m:#010x})")),
    };
    let u32_at = |i: usize| -> Result<u32, String> {
        let b: [u8; 4] = bytes
            .get(i..i + 4)
            .ok_or("cut short")?
            .try_into()
            .expect("4 bytes");
        Ok(if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let linktype = (u32_at(20).map_err(|_| "shorter than a pcap file header")? & 0xffff) as u16;
    let record = |i: usize| -> Result<(u64, u32, Vec<u8>), String> {
        let (sec, frac, caplen, len) =
            (u32_at(i)?, u32_at(i + 4)?, u32_at(i + 8)?, u32_at(i + 12)?);
        let data = bytes
            .get(i + 16..i + 16 + caplen as usize)
            .ok_or("cut short")?;
        let ts = sec as u64 * 1_000_000_000 + frac as u64 * if ns { 1 } else { 1000 };
        Ok((ts, len, data.to_vec()))
    };
    let (mut packets, mut cut_short, mut i) = (Vec::new(), false, 24);
    while i < bytes.len() {
        let Ok(packet) = record(i) else {
            cut_short = true;
            break;
        };
        i += 16 + packet.2.len();
        packets.push(packet);
    }
    Ok(Pcap {
        linktype,
        packets,
        cut_short,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
    }

    /// Walks the blocks as a reader does: each block's two lengths agree and are words.
    fn blocks(b: &[u8]) -> Vec<(u32, &[u8])> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let (kind, len) = (u32_at(b, i), u32_at(b, i + 4) as usize);
            assert_eq!(len % 4, 0);
            assert_eq!(u32_at(b, i + len - 4) as usize, len);
            out.push((kind, &b[i + 8..i + len - 4]));
            i += len;
        }
        out
    }

    #[test]
    fn blocks_are_framed_and_packets_keep_their_snap_length() {
        let mut w = PcapngWriter::new(Vec::new(), "tacc").unwrap();
        let port = w.interface("sw0->r0", LINKTYPE_RAW, 6).unwrap();
        let ts = 5_000_000_123;
        w.packet(port, ts, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 9, Some("dropped"))
            .unwrap();
        let b = w.out;
        let bl = blocks(&b);
        assert_eq!(bl.iter().map(|x| x.0).collect::<Vec<_>>(), [SHB, IDB, EPB]);
        assert_eq!(u32_at(bl[0].1, 0), BYTE_ORDER_MAGIC);
        let idb = bl[1].1;
        assert_eq!(u16::from_le_bytes([idb[0], idb[1]]), LINKTYPE_RAW);
        assert_eq!(&idb[12..19], b"sw0->r0");
        let epb = bl[2].1;
        let at = ((u32_at(epb, 4) as u64) << 32) | u32_at(epb, 8) as u64;
        assert_eq!((u32_at(epb, 0), at), (0, ts));
        assert_eq!((u32_at(epb, 12), u32_at(epb, 16)), (6, 9));
        assert_eq!(&epb[20..26], &[1, 2, 3, 4, 5, 6]);
        // The comment option after the padded data: code 1, length 7.
        assert_eq!(&epb[28..39], b"\x01\x00\x07\x00dropped");
    }

    #[test]
    fn classic_pcap_reads_in_either_byte_order_and_resolution() {
        let mut b = Vec::new();
        for w in [0xa1b2_3c4du32, 0x0004_0002, 0, 0, 65535, 1] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        for w in [3u32, 250, 2, 60] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b.extend_from_slice(&[0xaa, 0xbb]);
        let p = read_pcap(&b).unwrap();
        assert_eq!(p.linktype, LINKTYPE_ETHERNET);
        assert_eq!(p.packets, [(3_000_000_250, 60, vec![0xaa, 0xbb])]);
        b[..4].copy_from_slice(&0xa1b2_c3d4u32.to_be_bytes());
        assert_eq!(read_pcap(&b).unwrap().packets[0].0, 3_000_250_000);
        assert!(!read_pcap(&b).unwrap().cut_short);
        // Stopped inside the record: the whole packets before it are kept.
        let cut = read_pcap(&b[..b.len() - 1]).unwrap();
        assert!(cut.cut_short && cut.packets.is_empty());
        assert!(read_pcap(&b[..24]).unwrap().packets.is_empty());
        assert!(read_pcap(&b[..20]).is_err());
        assert!(read_pcap(b"nope").is_err());
    }
}
