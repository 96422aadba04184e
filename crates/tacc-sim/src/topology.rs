//! Topology builders: turn a scenario's `[topology]` into named hosts, switches and links,
//! and compute shortest-path (ECMP) routes.

use crate::scenario::Topology;
use std::collections::{HashMap, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRef {
    Host(u32),
    Switch(u32),
}

#[derive(Clone, Debug)]
pub struct Link {
    pub a: NodeRef,
    pub b: NodeRef,
    pub rate_bps: u64,
    pub delay_ns: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The scenario's `topology.kind`.
    pub kind: &'static str,
    pub hosts: Vec<String>,
    pub switches: Vec<String>,
    pub links: Vec<Link>,
    pub vms_per_host: u32,
}

impl Graph {
    fn host(&mut self, name: String) -> NodeRef {
        self.hosts.push(name);
        NodeRef::Host(self.hosts.len() as u32 - 1)
    }
    fn switch(&mut self, name: String) -> NodeRef {
        self.switches.push(name);
        NodeRef::Switch(self.switches.len() as u32 - 1)
    }
    fn link(&mut self, a: NodeRef, b: NodeRef, rate_bps: u64, delay_ns: u64) {
        self.links.push(Link {
            a,
            b,
            rate_bps,
            delay_ns,
        });
    }
    pub fn name(&self, n: NodeRef) -> &str {
        match n {
            NodeRef::Host(i) => &self.hosts[i as usize],
            NodeRef::Switch(i) => &self.switches[i as usize],
        }
    }
}

/// Builds the graph; errors are (key, message).
pub fn build(t: &Topology) -> Result<Graph, (String, String)> {
    let positive = |key: &str, v: u64| {
        if v == 0 {
            Err((
                format!("topology.{key}"),
                "must be greater than zero".to_string(),
            ))
        } else {
            Ok(())
        }
    };
    let mut g = Graph {
        kind: t.kind(),
        ..Graph::default()
    };
    match t {
        Topology::Star {
            senders,
            receivers,
            link_rate,
            link_delay,
            vms_per_host,
        } => {
            positive("senders", *senders as u64)?;
            positive("receivers", *receivers as u64)?;
            positive("link_rate", link_rate.0)?;
            g.vms_per_host = *vms_per_host;
            let sw = g.switch("sw0".into());
            for i in 0..*senders {
                let h = g.host(format!("s{i}"));
                g.link(h, sw, link_rate.0, link_delay.0);
            }
            for i in 0..*receivers {
                let h = g.host(format!("r{i}"));
                g.link(sw, h, link_rate.0, link_delay.0);
            }
        }
        Topology::Dumbbell {
            senders,
            receivers,
            link_rate,
            link_delay,
            bottleneck_rate,
            bottleneck_delay,
            vms_per_host,
        } => {
            positive("senders", *senders as u64)?;
            positive("receivers", *receivers as u64)?;
            positive("link_rate", link_rate.0)?;
            let br = bottleneck_rate.map(|r| r.0).unwrap_or(link_rate.0);
            positive("bottleneck_rate", br)?;
            g.vms_per_host = *vms_per_host;
            let l = g.switch("swL".into());
            let r = g.switch("swR".into());
            g.link(
                l,
                r,
                br,
                bottleneck_delay.map(|d| d.0).unwrap_or(link_delay.0),
            );
            for i in 0..*senders {
                let h = g.host(format!("s{i}"));
                g.link(h, l, link_rate.0, link_delay.0);
            }
            for i in 0..*receivers {
                let h = g.host(format!("r{i}"));
                g.link(r, h, link_rate.0, link_delay.0);
            }
        }
        Topology::Racks {
            racks,
            servers_per_rack,
            aggs,
            cores,
            host_rate,
            tor_rate,
            agg_rate,
            link_delay,
            vms_per_host,
        } => {
            for (k, v) in [
                ("racks", *racks as u64),
                ("servers_per_rack", *servers_per_rack as u64),
                ("aggs", *aggs as u64),
                ("cores", *cores as u64),
                ("host_rate", host_rate.0),
                ("tor_rate", tor_rate.0),
                ("agg_rate", agg_rate.0),
            ] {
                positive(k, v)?;
            }
            g.vms_per_host = *vms_per_host;
            let cores: Vec<_> = (0..*cores).map(|c| g.switch(format!("core{c}"))).collect();
            let aggs: Vec<_> = (0..*aggs).map(|a| g.switch(format!("agg{a}"))).collect();
            for &a in &aggs {
                for &c in &cores {
                    g.link(a, c, agg_rate.0, link_delay.0);
                }
            }
            for r in 0..*racks {
                let tor = g.switch(format!("tor{r}"));
                for &a in &aggs {
                    g.link(tor, a, tor_rate.0, link_delay.0);
                }
                for i in 0..*servers_per_rack {
                    let h = g.host(format!("h{r}_{i}"));
                    g.link(h, tor, host_rate.0, link_delay.0);
                }
            }
        }
        Topology::FatTree {
            k,
            link_rate,
            link_delay,
            vms_per_host,
        } => {
            if *k < 2 || k % 2 != 0 {
                return Err((
                    "topology.k".into(),
                    format!("expected an even number >= 2, got {k}"),
                ));
            }
            positive("link_rate", link_rate.0)?;
            g.vms_per_host = *vms_per_host;
            let half = k / 2;
            let cores: Vec<_> = (0..half * half)
                .map(|c| g.switch(format!("core{c}")))
                .collect();
            let mut host = 0;
            for p in 0..*k {
                let aggs: Vec<_> = (0..half).map(|a| g.switch(format!("agg{p}_{a}"))).collect();
                for (a, &agg) in aggs.iter().enumerate() {
                    for c in 0..half {
                        g.link(
                            agg,
                            cores[(a as u32 * half + c) as usize],
                            link_rate.0,
                            link_delay.0,
                        );
                    }
                }
                for e in 0..half {
                    let edge = g.switch(format!("edge{p}_{e}"));
                    for &agg in &aggs {
                        g.link(edge, agg, link_rate.0, link_delay.0);
                    }
                    for _ in 0..half {
                        let h = g.host(format!("h{host}"));
                        host += 1;
                        g.link(h, edge, link_rate.0, link_delay.0);
                    }
                }
            }
        }
        Topology::Explicit {
            hosts,
            switches,
            links,
            vms_per_host,
        } => {
            g.vms_per_host = *vms_per_host;
            let mut names = HashMap::new();
            for h in hosts {
                let n = g.host(h.clone());
                if names.insert(h.clone(), n).is_some() {
                    return Err((
                        "topology.hosts".into(),
                        format!("duplicate node name {h:?}"),
                    ));
                }
            }
            for s in switches {
                let n = g.switch(s.clone());
                if names.insert(s.clone(), n).is_some() {
                    return Err((
                        "topology.switches".into(),
                        format!("duplicate node name {s:?}"),
                    ));
                }
            }
            for (i, l) in links.iter().enumerate() {
                let find = |key: &str, n: &str| {
                    names.get(n).copied().ok_or_else(|| {
                        (
                            format!("topology.links[{i}].{key}"),
                            format!("no node named {n:?}"),
                        )
                    })
                };
                let a = find("a", &l.a)?;
                let b = find("b", &l.b)?;
                if l.rate.0 == 0 {
                    return Err((
                        format!("topology.links[{i}].rate"),
                        "must be greater than zero".into(),
                    ));
                }
                if a == b {
                    return Err((
                        format!("topology.links[{i}].b"),
                        "a link needs two different nodes".into(),
                    ));
                }
                g.link(a, b, l.rate.0, l.delay.0);
            }
            let mut degree = vec![0; g.hosts.len()];
            for l in &g.links {
                for n in [l.a, l.b] {
                    if let NodeRef::Host(h) = n {
                        degree[h as usize] += 1;
                    }
                }
            }
            if let Some(h) = degree.iter().position(|&d| d != 1) {
                return Err((
                    "topology.links".into(),
                    format!(
                        "host {:?} must have exactly one link (it has {})",
                        g.hosts[h], degree[h]
                    ),
                ));
            }
        }
    }
    if g.vms_per_host == 0 {
        return Err((
            "topology.vms_per_host".into(),
            "must be greater than zero".into(),
        ));
    }
    Ok(g)
}

/// Directed ports: port 2i is link i's a->b direction, 2i+1 is b->a.
pub fn port_name(g: &Graph, port: usize) -> String {
    let (from, to) = port_ends(g, port);
    format!("{}->{}", g.name(from), g.name(to))
}

/// The nodes a port sends from and to: port 2i is link i from a to b, port 2i+1 back.
pub fn port_ends(g: &Graph, port: usize) -> (NodeRef, NodeRef) {
    let l = &g.links[port / 2];
    if port.is_multiple_of(2) {
        (l.a, l.b)
    } else {
        (l.b, l.a)
    }
}

/// Where the hosts hang off the switches. Every host has one link, so the hosts behind one
/// switch (a group) share every route but the last hop.
pub struct Attachments {
    /// Per host: its group (`NONE` for a host linked straight to another host).
    pub group: Vec<u32>,
    /// Per host: the switch it hangs off and that switch's port to it (`NONE` for neither).
    pub last_hop: Vec<(u32, u32)>,
    /// Per group: the switch its hosts hang off.
    pub roots: Vec<u32>,
}

pub const NONE: u32 = u32::MAX;

/// Adjacency of switches: (neighbor, port) in port order.
fn switch_adjacency(g: &Graph) -> Vec<Vec<(NodeRef, u32)>> {
    let mut adj: Vec<Vec<(NodeRef, u32)>> = vec![Vec::new(); g.switches.len()];
    for (i, l) in g.links.iter().enumerate() {
        if let NodeRef::Switch(s) = l.a {
            adj[s as usize].push((l.b, 2 * i as u32));
        }
        if let NodeRef::Switch(s) = l.b {
            adj[s as usize].push((l.a, 2 * i as u32 + 1));
        }
    }
    adj
}

pub fn attachments(g: &Graph) -> Attachments {
    let mut at = Attachments {
        group: vec![NONE; g.hosts.len()],
        last_hop: vec![(NONE, NONE); g.hosts.len()],
        roots: Vec::new(),
    };
    let mut group_of_switch = vec![NONE; g.switches.len()];
    for (s, ports) in switch_adjacency(g).iter().enumerate() {
        for &(nb, port) in ports {
            if let NodeRef::Host(h) = nb {
                if group_of_switch[s] == NONE {
                    group_of_switch[s] = at.roots.len() as u32;
                    at.roots.push(s as u32);
                }
                at.group[h as usize] = group_of_switch[s];
                at.last_hop[h as usize] = (s as u32, port);
            }
        }
    }
    at
}

/// Shortest-path (ECMP) routes towards each group of hosts: `visit(group, switch, ports)`
/// for every other switch that reaches the group, with the egress ports on a shortest path
/// (the ECMP set, in the switch's port order). Hosts never forward. One BFS per group and
/// nothing kept per (switch, host) pair: a large fat tree has tens of millions of them.
pub fn routes(g: &Graph, at: &Attachments, mut visit: impl FnMut(u32, u32, &[u32])) {
    let adj = switch_adjacency(g);
    let mut dist = vec![u32::MAX; g.switches.len()];
    let mut q = VecDeque::new();
    let mut choices = Vec::new();
    for (group, &root) in at.roots.iter().enumerate() {
        dist.fill(u32::MAX);
        dist[root as usize] = 0;
        q.push_back(root as usize);
        while let Some(s) = q.pop_front() {
            for &(nb, _) in &adj[s] {
                if let NodeRef::Switch(t) = nb {
                    let t = t as usize;
                    if dist[t] == u32::MAX {
                        dist[t] = dist[s] + 1;
                        q.push_back(t);
                    }
                }
            }
        }
        for (s, &d) in dist.iter().enumerate() {
            if d == 0 || d == u32::MAX {
                continue;
            }
            choices.clear();
            for &(nb, port) in &adj[s] {
                if matches!(nb, NodeRef::Switch(t) if dist[t as usize] + 1 == d) {
                    choices.push(port);
                }
            }
            visit(group as u32, s as u32, &choices);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{Duration, Rate};

    #[test]
    fn fat_tree_k4_has_16_hosts_20_switches_and_4_core_paths_between_pods() {
        let g = build(&Topology::FatTree {
            k: 4,
            link_rate: Rate(1_000_000_000),
            link_delay: Duration(1000),
            vms_per_host: 1,
        })
        .unwrap();
        assert_eq!(g.hosts.len(), 16);
        assert_eq!(g.switches.len(), 20);
        assert_eq!(g.links.len(), 48);
        let at = attachments(&g);
        let mut r = HashMap::new();
        routes(&g, &at, |group, s, ports| {
            r.insert((s as usize, group), ports.len());
        });
        // two hosts per edge switch: eight groups, each reached from the other 19 switches
        assert_eq!(at.roots.len(), 8);
        assert_eq!(r.len(), 8 * 19);
        let g15 = at.group[15];
        assert_eq!(at.group[14], g15);
        // an edge switch in pod 0 reaches a host in pod 3 through both of its aggregation switches
        let edge0 = g.switches.iter().position(|s| s == "edge0_0").unwrap();
        assert_eq!(r[&(edge0, g15)], 2);
        let agg = g.switches.iter().position(|s| s == "agg0_0").unwrap();
        assert_eq!(r[&(agg, g15)], 2);
        // and the host hangs off its own edge switch by one port
        let edge3 = g.switches.iter().position(|s| s == "edge3_1").unwrap();
        assert_eq!(at.last_hop[15].0, edge3 as u32);
    }
}
