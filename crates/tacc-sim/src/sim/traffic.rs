//! The traffic sources: scripted flows starting and stopping, UDP senders, partition-aggregate
//! epochs and open-loop arrivals.

use crate::model::App;
use crate::packet::{Packet, NO_EP};
use crate::scenario::Forge;
use crate::units::ser_ns;
use tacc_mech::headers::ip_proto;

use super::{EvKind, Sim};

impl Sim {
    // ------------------------------------------------------------------ applications

    pub(super) fn flow_start(&mut self, f: u32) {
        let now = self.now;
        let flow = &self.m.flows[f as usize];
        if flow.udp.is_some() {
            self.udp_send(f);
            return;
        }
        let tx = flow.tx_ep;
        let bytes = flow.bytes;
        if let Some(t) = self.m.tcp_mut(tx) {
            t.send(bytes.unwrap_or(u64::MAX / 4));
            if bytes.is_some() {
                t.close();
            }
            t.connect(now);
        }
        self.pump(tx);
    }

    pub(super) fn flow_stop(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.m.flows[f as usize];
        if flow.end.is_none() {
            flow.end = Some(now);
        }
        flow.stopped = true;
        let tx = flow.tx_ep;
        if let Some(t) = self.m.tcp_mut(tx) {
            t.stop();
            self.pump(tx);
        }
    }

    pub(super) fn udp_send(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.m.flows[f as usize];
        if flow.stopped {
            return;
        }
        let udp = flow.udp.as_mut().expect("udp flow");
        // On/off sources: leave the current period when it ends.
        if let (Some(on), Some(off)) = (udp.on_mean, udp.off_mean) {
            if now >= udp.period_end {
                if udp.is_on {
                    udp.is_on = false;
                    udp.period_end = now + self.m.rng.exponential(off as f64) as u64;
                } else {
                    udp.is_on = true;
                    udp.period_end = now + self.m.rng.exponential(on as f64) as u64;
                }
            }
            if !udp.is_on {
                let at = udp.period_end;
                self.schedule(at, EvKind::UdpSend(f));
                return;
            }
        }
        let size = udp.packet_size;
        // Inter-packet gaps vary uniformly by +/-10% around the CBR period (mean rate exact),
        // like ns-2's CBR `random_`: perfectly periodic sources phase-lock at a shared queue
        // and one of them would win every free slot.
        let period = ser_ns(udp.rate_bps, size) as f64;
        let gap = (period * (0.9 + 0.2 * self.m.rng.uniform())).round() as u64;
        let dst = self.m.vms[flow.dst_vm as usize].ip;
        let protocol = match udp.forge {
            Some(Forge::Feedback) => ip_proto::FEEDBACK,
            _ => ip_proto::UDP,
        };
        let mut p = Packet::new(udp.src_ip, dst, protocol, size);
        match udp.forge {
            Some(Forge::Feedback) => p.ip_id = 1,
            Some(Forge::Ipr) => p.reserved_bit = true,
            None => {}
        }
        p.sport = flow.sport;
        p.dport = flow.dport;
        p.dst_ep = flow.rx_ep;
        let vm = flow.src_vm;
        let id = self.pkts.alloc(p);
        self.vm_send(vm, id, NO_EP);
        self.schedule(now + gap, EvKind::UdpSend(f));
    }

    pub(super) fn incast_epoch(&mut self, a: u32) {
        let now = self.now;
        let App::Incast(inc) = &mut self.m.apps[a as usize] else {
            return;
        };
        if inc.epoch >= inc.epochs {
            return;
        }
        let epoch = inc.epoch;
        inc.epoch += 1;
        inc.outstanding = inc.workers.len() as u32;
        // The epoch began as its requests reached the nearest worker; each starts when its
        // own reaches it.
        let flights: Vec<u64> = inc.request_ns.iter().map(|r| r - inc.request_min).collect();
        let (workers, agg, bytes, jitter, name) = (
            inc.workers.clone(),
            inc.aggregator,
            inc.bytes,
            inc.jitter,
            inc.name.clone(),
        );
        let tcp = inc.tcp.clone();
        if let Some(iv) = inc.interval {
            let next = inc.start + iv * (epoch as u64 + 1);
            self.schedule(next, EvKind::IncastEpoch(a));
        }
        for (w, &vm) in workers.iter().enumerate() {
            let delay = flights[w]
                + match &mut self.m.apps[a as usize] {
                    App::Incast(inc) if jitter > 0 => inc.rng.exponential(jitter as f64) as u64,
                    _ => 0,
                };
            let f = self.m.add_tcp_flow(
                format!("{name}.{w}.{epoch}"),
                name.clone(),
                vm,
                agg,
                now + delay,
                Some(bytes),
                tcp.clone(),
                Some(a),
            );
            // Every partition runs the epoch (an interval's epochs fall at fixed times), so
            // that a flow has the same index in each; the worker's starts it.
            if self.m.vm_is_local(vm) {
                self.schedule(now + delay, EvKind::FlowStart(f));
            }
        }
    }

    pub(super) fn incast_flow_done(&mut self, a: u32) {
        let now = self.now;
        let App::Incast(inc) = &mut self.m.apps[a as usize] else {
            return;
        };
        inc.outstanding = inc.outstanding.saturating_sub(1);
        if inc.outstanding > 0 || inc.interval.is_some() || inc.epoch >= inc.epochs {
            return;
        }
        // The next requests leave now, and the epoch begins as they reach the nearest
        // worker: no sooner than the lookahead (`parallel::plan`), so every partition can be
        // told in time, this one too, and all make its flows in the same order.
        let at = now + inc.request_min;
        match self.split.as_deref_mut() {
            Some(split) => {
                for outbox in &mut split.outbox {
                    outbox.push(super::Mail {
                        at,
                        cargo: super::Cargo::Epoch(a),
                    });
                }
            }
            None => self.schedule(at, EvKind::IncastEpoch(a)),
        }
    }

    pub(super) fn traffic_arrival(&mut self, a: u32) {
        let now = self.now;
        let App::Traffic(t) = &mut self.m.apps[a as usize] else {
            return;
        };
        if t.stop.is_some_and(|s| now >= s) {
            return;
        }
        let arrival = t.next_arrival();
        let (name, k, tcp) = (t.name.clone(), t.count, t.tcp.clone());
        t.count += 1;
        let f = self.m.add_tcp_flow(
            format!("{name}.{k}"),
            name,
            arrival.src,
            arrival.dst,
            now,
            Some(arrival.bytes),
            tcp,
            None,
        );
        // Every partition draws the arrivals (from the source's own stream), so that a flow
        // has the same index in each; the sender's starts it.
        if self.m.vm_is_local(arrival.src) {
            self.flow_start(f);
        }
        self.schedule(now + arrival.gap_ns.max(1), EvKind::TrafficArrival(a));
    }
}
