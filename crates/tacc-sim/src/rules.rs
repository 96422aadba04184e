//! Switch flow tables: match-action rules with priority and hard timeout, the hook an SDN
//! controller programs (OpenFlow-like). Checked before normal routing when a table is non-empty.

use crate::packet::Packet;
use tacc_mech::headers::PacketHeaders;

pub use tacc_mech::control::{Forward, RuleActions, RuleMatch};

/// Whether `p` matches `m`. Ports are matched on TCP and UDP alike (the packet's transport
/// ports, as an OpenFlow match on tp_src/tp_dst).
pub fn matches(m: &RuleMatch, p: &Packet) -> bool {
    m.src.is_none_or(|v| v == p.src)
        && m.dst.is_none_or(|v| v == p.dst)
        && m.protocol.is_none_or(|v| v == p.protocol)
        && m.sport.is_none_or(|v| v == p.sport)
        && m.dport.is_none_or(|v| v == p.dport)
        && (m.flags_mask == 0
            || p.tcp_flags()
                .is_some_and(|f| f & m.flags_mask == m.flags_value))
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub m: RuleMatch,
    pub priority: u16,
    pub actions: RuleActions,
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
    pub fn remove(&mut self, m: &RuleMatch, priority: u16) -> usize {
        let before = self.rules.len();
        self.rules
            .retain(|r| !(r.m == *m && r.priority == priority));
        before - self.rules.len()
    }

    /// The actions of the best live rule matching `p`, counting the packet against it.
    pub fn lookup(&mut self, now: u64, p: &Packet) -> Option<RuleActions> {
        let before = self.rules.len();
        self.rules.retain(|r| r.expires_at.is_none_or(|t| t > now));
        self.expired += (before - self.rules.len()) as u64;
        let r = self.rules.iter_mut().find(|r| matches(&r.m, p))?;
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

    fn rule(m: RuleMatch, priority: u16, expires_at: Option<u64>, set_ce: bool) -> Rule {
        Rule {
            m,
            priority,
            actions: RuleActions {
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
        t.install(rule(RuleMatch::default(), 1, None, false));
        t.install(rule(
            RuleMatch {
                src: Some(1),
                ..RuleMatch::default()
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
            RuleMatch {
                flags_mask: tcp_flags::SYN | tcp_flags::ACK,
                flags_value: tcp_flags::SYN,
                ..RuleMatch::default()
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
        let m = RuleMatch {
            src: Some(1),
            ..RuleMatch::default()
        };
        t.install(rule(RuleMatch::default(), 1, None, false));
        t.install(rule(m.clone(), 10, None, true));
        assert_eq!(t.remove(&m, 9), 0, "priority must match too");
        assert!(t.lookup(0, &syn(1)).unwrap().set_ce);
        assert_eq!(t.remove(&m, 10), 1);
        assert!(!t.lookup(0, &syn(1)).unwrap().set_ce);
        assert_eq!(t.rules().len(), 1);
    }
}
