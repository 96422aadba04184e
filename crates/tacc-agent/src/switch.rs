//! The switch agent: in a switch namespace. It attaches `switch.bpf.c` to the egress of every
//! port, configures each red-ecn port's marking (K, the buffer, the drain rate) and samples the
//! ports' counters to a CSV file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::TcAttachType;
use aya::Ebpf;
use serde::Deserialize;
use tacc_mech::units::Size;

use crate::tc::{attach, load};
use crate::{
    default_scale, ifindex, monotonic_ns, signal_ready, sleep_ns, take_map, Plan, SWITCH_OBJECT,
};

#[derive(Deserialize)]
pub struct SwitchConfig {
    pub plan: Plan,
    pub switch: u32,
    /// Port index -> the port's interface in the switch namespace.
    pub ports: BTreeMap<String, String>,
    pub start_mono_ns: u64,
    pub sample_ns: u64,
    /// Port counters over time: `time_s,port,tx_bytes,tx_pkts,marks,aqm_drops,phantom_bytes`.
    pub out: PathBuf,
    pub ready: PathBuf,
    /// Ports run at their nominal rate times this.
    #[serde(default = "default_scale")]
    pub rate_scale: f64,
    /// The phantom queue drains at this fraction of the port's rate.
    #[serde(default = "full_rate")]
    pub drain_fraction: f64,
}

fn full_rate() -> f64 {
    1.0
}

/// Frame bytes per packet where the scenario sizes a queue in packets (1500 B of IP and the
/// Ethernet header tc counts).
const FRAME_BYTES: u64 = 1514;

fn bytes(s: Size) -> u64 {
    match s {
        Size::Packets(n) => n * FRAME_BYTES,
        Size::Bytes(b) => b,
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PortConfig {
    drain_bytes_per_sec: u64,
    k_bytes: u64,
    limit_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PortState {
    lock: u32,
    pad: u32,
    queue_bytes: u64,
    last_ns: u64,
    tx_packets: u64,
    tx_bytes: u64,
    marks: u64,
    drops: u64,
}

// SAFETY: plain C structs; the padding is explicit.
unsafe impl aya::Pod for PortConfig {}
unsafe impl aya::Pod for PortState {}

pub fn run(cfg: SwitchConfig) -> Result<(), String> {
    let plan = &cfg.plan;
    let mut bpf = Ebpf::load(SWITCH_OBJECT).map_err(|e| format!("loading switch.bpf.o: {e}"))?;
    load(&mut bpf, &["port_egress"])?;
    let mut config: BpfHashMap<MapData, u32, PortConfig> = take_map(&mut bpf, "port_config")?;
    let mut state: BpfHashMap<MapData, u32, PortState> = take_map(&mut bpf, "ports")?;
    let mut ports = Vec::new();
    for (index, ifname) in &cfg.ports {
        let port: usize = index
            .parse()
            .map_err(|_| format!("bad port index {index:?}"))?;
        let p = plan
            .ports
            .get(port)
            .ok_or_else(|| format!("no port {port} in the plan"))?;
        let ifx = ifindex(ifname)?;
        let marking = p.queue.kind == "red-ecn";
        let pc = PortConfig {
            drain_bytes_per_sec: if marking {
                (p.rate_bps as f64 * cfg.rate_scale * cfg.drain_fraction / 8.0) as u64
            } else {
                0
            },
            k_bytes: p.queue.k().map(bytes).unwrap_or(u64::MAX),
            limit_bytes: bytes(p.queue.limit()),
        };
        config
            .insert(ifx, pc, 0)
            .map_err(|e| format!("port_config: {e}"))?;
        state
            .insert(ifx, PortState::default(), 0)
            .map_err(|e| format!("ports: {e}"))?;
        attach(&mut bpf, "port_egress", ifname, TcAttachType::Egress)?;
        ports.push((ifx, p.name.clone()));
    }
    let mut out = BufWriter::new(
        File::create(&cfg.out).map_err(|e| format!("cannot write {}: {e}", cfg.out.display()))?,
    );
    writeln!(
        out,
        "time_s,port,tx_bytes,tx_pkts,marks,aqm_drops,phantom_bytes"
    )
    .map_err(|e| e.to_string())?;
    signal_ready(&cfg.ready)?;
    let sample = cfg.sample_ns.max(1_000_000);
    loop {
        let now = monotonic_ns().saturating_sub(cfg.start_mono_ns);
        for (ifx, name) in &ports {
            let s = state.get(ifx, 0).map_err(|e| format!("ports map: {e}"))?;
            writeln!(
                out,
                "{},{name},{},{},{},{},{}",
                now as f64 / 1e9,
                s.tx_bytes,
                s.tx_packets,
                s.marks,
                s.drops,
                s.queue_bytes
            )
            .map_err(|e| e.to_string())?;
        }
        out.flush().map_err(|e| e.to_string())?;
        let next = (now / sample + 1) * sample;
        sleep_ns(next - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testrun::{frame, privileged, run, TC_ACT_OK, TC_ACT_SHOT};
    use tacc_mech::headers::{ip_proto, Ecn, PacketHeaders};
    use tacc_mech::wire::{emit, Ipv4Fields, Ipv4Packet};

    /// BPF_PROG_TEST_RUN runs a frame on the loopback device.
    const LOOPBACK: u32 = 1;

    fn full_frame(ecn: Ecn) -> Vec<u8> {
        frame(&emit(
            &Ipv4Fields {
                src: 0x0a00_0001,
                dst: 0x0a00_0002,
                protocol: ip_proto::UDP,
                ident: 1,
                ecn,
                total_len: 1500,
                ttl: 64,
            },
            None,
        ))
    }

    #[test]
    fn above_k_the_phantom_queue_marks_ect_and_drops_not_ect_frames() {
        if !privileged("switch datapath") {
            return;
        }
        let mut bpf = Ebpf::load(SWITCH_OBJECT).unwrap();
        load(&mut bpf, &["port_egress"]).unwrap();
        let mut config: BpfHashMap<MapData, u32, PortConfig> =
            take_map(&mut bpf, "port_config").unwrap();
        let state: BpfHashMap<MapData, u32, PortState> = take_map(&mut bpf, "ports").unwrap();
        // Drains 125 B/ms: a few bytes between back-to-back test runs. K just under 2 frames.
        let pc = PortConfig {
            drain_bytes_per_sec: 125_000,
            k_bytes: 2 * FRAME_BYTES - 100,
            limit_bytes: 10 * FRAME_BYTES,
        };
        config.insert(LOOPBACK, pc, 0).unwrap();
        let mut state = state;
        state.insert(LOOPBACK, PortState::default(), 0).unwrap();

        let ect = full_frame(Ecn::Ect0);
        for _ in 0..2 {
            let out = run(&mut bpf, "port_egress", &ect);
            assert_eq!(out.verdict, TC_ACT_OK);
            assert!(out.frame == ect, "below K: untouched");
        }
        let out = run(&mut bpf, "port_egress", &ect);
        let mut marked = ect[14..].to_vec();
        Ipv4Packet::new_checked(&mut marked[..])
            .unwrap()
            .set_ecn(Ecn::Ce);
        // At K: CE, the checksum patched as the wire code does.
        assert_eq!(out.frame[..34], frame(&marked)[..34]);
        assert!(out.frame == frame(&marked));
        assert_eq!(
            run(&mut bpf, "port_egress", &full_frame(Ecn::NotEct)).verdict,
            TC_ACT_SHOT
        );
        let s = state.get(&LOOPBACK, 0).unwrap();
        assert_eq!((s.tx_packets, s.marks, s.drops), (3, 1, 1));
        assert_eq!(s.tx_bytes, 3 * FRAME_BYTES);
    }
}
