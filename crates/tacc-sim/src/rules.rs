//! Switch flow tables: match-action rules with priority and hard timeout, the hook an SDN
//! controller programs (OpenFlow-like). Checked before normal routing when a table is non-empty.

use crate::packet::Packet;
use tacc_mech::headers::PacketHeaders;

/// Header fields a rule matches; `None` is a wildcard. TCP flags match when
/// `flags & flags_mask == flags_value` (non-TCP packets never match a flags condition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    pub src: Option<u32>,
    pub dst: Option<u32>,
    pub protocol: Option<u8>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub flags_mask: u8,
    pub flags_value: u8,
}

impl Match {
    pub fn matches(&self, p: &Packet) -> bool {
        self.src.is_none_or(|v| v == p.src)
            && self.dst.is_none_or(|v| v == p.dst)
            && self.protocol.is_none_or(|v| v == p.protocol)
            && self.sport.is_none_or(|v| v == p.sport)
            && self.dport.is_none_or(|v| v == p.dport)
            && (self.flags_mask == 0
                || p.tcp_flags()
                    .is_some_and(|f| f & self.flags_mask == self.flags_value))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Continue with the switch's routing table (ECMP).
    Normal,
    /// Send out of this port.
    Port(u32),
    Drop,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actions {
    pub forward: Forward,
    /// Set the ECN field to CE (only on ECN-capable packets, as a marking AQM would).
    pub set_ce: bool,
    /// Send a copy of the headers to the controller (packet-in).
    pub copy_to_controller: bool,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub m: Match,
    pub priority: u16,
    pub actions: Actions,
    /// The rule disappears at this time.
    pub expires_at: Option<u64>,
    pub packets: u64,
    pub bytes: u64,
}

/// One switch's table: highest priority wins; among equals, the earliest installed.
#[derive(Clone, Debug, Default)]
pub struct FlowTable {
    rules: Vec<Rule>,
    pub installed: u64,
    pub expired: u64,
}

impl FlowTable {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn install(&mut self, rule: Rule) {
        let at = self.rules.partition_point(|r| r.priority >= rule.priority);
        self.rules.insert(at, rule);
        self.installed += 1;
    }

    /// Removes rules with exactly this match and priority; returns how many.
    pub fn remove(&mut self, m: &Match, priority: u16) -> usize {
        let before = self.rules.len();
        self.rules
            .retain(|r| !(r.m == *m && r.priority == priority));
        before - self.rules.len()
    }

    /// The actions of the best live rule matching `p`, counting the packet against it.
    pub fn lookup(&mut self, now: u64, p: &Packet) -> Option<Actions> {
        let before = self.rules.len();
        self.rules.retain(|r| r.expires_at.is_none_or(|t| t > now));
        self.expired += (before - self.rules.len()) as u64;
        let r = self.rules.iter_mut().find(|r| r.m.matches(p))?;
        r.packets += 1;
        r.bytes += p.len as u64;
        Some(r.actions.clone())
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacc_mech::headers::{ip_proto, tcp_flags};

    fn syn(src: u32) -> Packet {
        let mut p = Packet::new(src, 2, ip_proto::TCP, 40);
        p.flags = tcp_flags::SYN;
        p
    }

    fn rule(m: Match, priority: u16, expires_at: Option<u64>, set_ce: bool) -> Rule {
        Rule {
            m,
            priority,
            actions: Actions {
                forward: Forward::Normal,
                set_ce,
                copy_to_controller: false,
            },
            expires_at,
            packets: 0,
            bytes: 0,
        }
    }

    #[test]
    fn highest_priority_matching_rule_wins_and_expires_at_its_hard_timeout() {
        let mut t = FlowTable::default();
        t.install(rule(Match::default(), 1, None, false));
        t.install(rule(
            Match {
                src: Some(1),
                ..Match::default()
            },
            10,
            Some(100),
            true,
        ));
        assert!(t.lookup(50, &syn(1)).unwrap().set_ce);
        assert!(!t.lookup(50, &syn(3)).unwrap().set_ce);
        assert!(!t.lookup(100, &syn(1)).unwrap().set_ce, "expired at 100");
        assert_eq!(t.expired, 1);
    }

    #[test]
    fn tcp_flag_conditions_select_syns_only() {
        let mut t = FlowTable::default();
        t.install(rule(
            Match {
                flags_mask: tcp_flags::SYN | tcp_flags::ACK,
                flags_value: tcp_flags::SYN,
                ..Match::default()
            },
            5,
            None,
            true,
        ));
        assert!(t.lookup(0, &syn(1)).is_some());
        let mut synack = syn(1);
        synack.flags |= tcp_flags::ACK;
        assert!(t.lookup(0, &synack).is_none());
        assert!(t
            .lookup(0, &Packet::new(1, 2, ip_proto::UDP, 100))
            .is_none());
    }

    #[test]
    fn removing_a_rule_by_match_and_priority_restores_the_lower_one() {
        let mut t = FlowTable::default();
        let m = Match {
            src: Some(1),
            ..Match::default()
        };
        t.install(rule(Match::default(), 1, None, false));
        t.install(rule(m.clone(), 10, None, true));
        assert_eq!(t.remove(&m, 9), 0, "priority must match too");
        assert!(t.lookup(0, &syn(1)).unwrap().set_ce);
        assert_eq!(t.remove(&m, 10), 1);
        assert!(!t.lookup(0, &syn(1)).unwrap().set_ce);
        assert_eq!(t.rules().len(), 1);
    }
}
