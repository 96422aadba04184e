//! The host agent's control socket: `HostMessage`s for the shim, authenticated with the run's
//! key, so that a process that can write to the socket but does not hold the key (a VM's
//! tenant, a stray script) cannot steer a shim, and a message seen once cannot be sent again.
//!
//! One datagram carries one message:
//!
//! ```text
//! mac (32 bytes) || seq (8 bytes, big-endian u64) || message (the HostMessage's JSON)
//! mac = HMAC-SHA256(key, seq || message)
//! ```
//!
//! A datagram is accepted only if its MAC verifies (compared in constant time) and its seq is
//! above every seq accepted before (sequence numbers start at 1; `tacc.testbed.control`
//! signs with nanoseconds since the epoch, so a restarted sender stays above its past).
//! Rejected datagrams are counted, each under one kind: `control_forged` (shorter than the
//! header, or the MAC does not verify: a wrong key, a flipped bit, a truncated message) and
//! `control_replayed` (authentic, but its seq is not above the last accepted). An authentic,
//! fresh datagram whose message is not a `HostMessage` counts as `control_malformed`: it
//! comes from a holder of the key, so it is a bug of the sender rather than an attack; its
//! seq is used up all the same.

use std::os::unix::net::UnixDatagram;
use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tacc_mech::control::HostMessage;
use tacc_mech::Nanos;

pub const KEY_LEN: usize = 32;
const MAC_LEN: usize = 32;
/// A rejection is reported on stderr at most this often per kind: a flood of forgeries must
/// not turn into a flood of lines.
const LOG_EVERY_NS: Nanos = 1_000_000_000;

/// Why a datagram was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    Forged,
    Replayed,
    Malformed,
}

impl Rejected {
    fn what(self) -> &'static str {
        match self {
            Rejected::Forged => "forged (bad MAC or too short)",
            Rejected::Replayed => "replayed (seq not above the last accepted)",
            Rejected::Malformed => "malformed (authentic, but not a HostMessage)",
        }
    }
}

/// The verifying side: the key and the highest seq accepted.
pub struct Verifier {
    mac: Hmac<Sha256>,
    last_seq: u64,
}

impl Verifier {
    pub fn new(key: &[u8]) -> Result<Verifier, String> {
        if key.len() != KEY_LEN {
            return Err(format!(
                "control key: expected {KEY_LEN} bytes, found {}",
                key.len()
            ));
        }
        let mac = Hmac::<Sha256>::new_from_slice(key).map_err(|e| format!("control key: {e}"))?;
        Ok(Verifier { mac, last_seq: 0 })
    }

    pub fn load(path: &Path) -> Result<Verifier, String> {
        let key =
            std::fs::read(path).map_err(|e| format!("control key {}: {e}", path.display()))?;
        Verifier::new(&key).map_err(|e| format!("{e} in {}", path.display()))
    }

    /// The message of an authentic datagram with a fresh seq (which it uses up).
    pub fn accept(&mut self, datagram: &[u8]) -> Result<HostMessage, Rejected> {
        self.accept_as(datagram)
    }

    /// [`Verifier::accept`] for a message of another type (what a channel's frame carries).
    pub fn accept_as<T: serde::de::DeserializeOwned>(
        &mut self,
        datagram: &[u8],
    ) -> Result<T, Rejected> {
        let Some((mac, signed)) = datagram.split_first_chunk::<MAC_LEN>() else {
            return Err(Rejected::Forged);
        };
        let Some((seq, message)) = signed.split_first_chunk::<8>() else {
            return Err(Rejected::Forged);
        };
        let mut check = self.mac.clone();
        check.update(signed);
        check.verify_slice(mac).map_err(|_| Rejected::Forged)?;
        let seq = u64::from_be_bytes(*seq);
        if seq <= self.last_seq {
            return Err(Rejected::Replayed);
        }
        self.last_seq = seq;
        serde_json::from_slice(message).map_err(|_| Rejected::Malformed)
    }
}

/// What the socket delivered and rejected, for the agent's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlCounts {
    pub accepted: u64,
    pub forged: u64,
    pub replayed: u64,
    pub malformed: u64,
}

impl ControlCounts {
    fn of(&mut self, kind: Rejected) -> &mut u64 {
        match kind {
            Rejected::Forged => &mut self.forged,
            Rejected::Replayed => &mut self.replayed,
            Rejected::Malformed => &mut self.malformed,
        }
    }

    /// The counters under their summary names.
    pub fn each(&self, out: &mut dyn FnMut(&'static str, f64)) {
        out("control_accepted", self.accepted as f64);
        out("control_forged", self.forged as f64);
        out("control_replayed", self.replayed as f64);
        out("control_malformed", self.malformed as f64);
    }
}

/// The bound socket, its verifier and its counts.
pub struct ControlSocket {
    sock: UnixDatagram,
    verifier: Verifier,
    pub counts: ControlCounts,
    /// When each kind of rejection was last reported (indexed by `Rejected as usize`).
    logged_at: [Option<Nanos>; 3],
}

impl ControlSocket {
    pub fn bind(path: &Path, key: &Path) -> Result<ControlSocket, String> {
        let verifier = Verifier::load(key)?;
        let _ = std::fs::remove_file(path);
        let sock = UnixDatagram::bind(path)
            .map_err(|e| format!("control socket {}: {e}", path.display()))?;
        sock.set_nonblocking(true)
            .map_err(|e| format!("control socket {}: {e}", path.display()))?;
        Ok(ControlSocket {
            sock,
            verifier,
            counts: ControlCounts::default(),
            logged_at: [None; 3],
        })
    }

    /// The socket, to wait on.
    pub fn socket(&self) -> &UnixDatagram {
        &self.sock
    }

    /// Reads every waiting datagram, handing each accepted message to `deliver`.
    pub fn drain(&mut self, now: Nanos, buf: &mut [u8], deliver: &mut dyn FnMut(&HostMessage)) {
        // A datagram longer than `buf` arrives truncated, so its MAC fails: rejected as forged.
        while let Ok(n) = self.sock.recv(buf) {
            match self.verifier.accept(&buf[..n]) {
                Ok(msg) => {
                    self.counts.accepted += 1;
                    deliver(&msg);
                }
                Err(kind) => self.reject(now, kind),
            }
        }
    }

    fn reject(&mut self, now: Nanos, kind: Rejected) {
        *self.counts.of(kind) += 1;
        let i = kind as usize;
        if self.logged_at[i].is_none_or(|t| now >= t + LOG_EVERY_NS) {
            self.logged_at[i] = Some(now);
            eprintln!(
                "tacc-agent: control socket: rejected a {} datagram ({} so far)",
                kind.what(),
                *self.counts.of(kind)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; KEY_LEN] = [7; KEY_LEN];
    const HEADER_LEN: usize = MAC_LEN + 8;
    const MESSAGE: &[u8] =
        br#"{"Congestion":{"to_src":167772161,"from_dst":167772163,"marks":50.0}}"#;

    fn sign(key: &[u8], seq: u64, message: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(&seq.to_be_bytes());
        mac.update(message);
        let mut datagram = mac.finalize().into_bytes().to_vec();
        datagram.extend_from_slice(&seq.to_be_bytes());
        datagram.extend_from_slice(message);
        datagram
    }

    #[test]
    fn an_authentic_fresh_datagram_is_accepted_and_its_message_parsed() {
        let mut v = Verifier::new(&KEY).unwrap();
        let msg = v.accept(&sign(&KEY, 5, MESSAGE)).unwrap();
        assert_eq!(msg, serde_json::from_slice::<HostMessage>(MESSAGE).unwrap());
        assert!(v.accept(&sign(&KEY, 6, MESSAGE)).is_ok());
    }

    #[test]
    fn a_flipped_bit_in_the_mac_the_seq_or_the_message_is_forged() {
        let mut v = Verifier::new(&KEY).unwrap();
        let good = sign(&KEY, 5, MESSAGE);
        // The MAC's first and last bytes, the seq's, the message's.
        for byte in [
            0,
            MAC_LEN - 1,
            MAC_LEN,
            HEADER_LEN - 1,
            HEADER_LEN,
            good.len() - 1,
        ] {
            for bit in [0x01, 0x80] {
                let mut bad = good.clone();
                bad[byte] ^= bit;
                assert_eq!(
                    v.accept(&bad),
                    Err(Rejected::Forged),
                    "byte {byte} ^ {bit:#x}"
                );
            }
        }
        // The forgeries used up no seq: the genuine datagram still passes.
        assert!(v.accept(&good).is_ok());
    }

    #[test]
    fn a_wrong_key_or_a_short_datagram_is_forged() {
        let mut v = Verifier::new(&KEY).unwrap();
        assert_eq!(
            v.accept(&sign(&[8; KEY_LEN], 5, MESSAGE)),
            Err(Rejected::Forged)
        );
        let good = sign(&KEY, 5, MESSAGE);
        for len in [0, HEADER_LEN - 1, HEADER_LEN, good.len() - 1] {
            assert_eq!(v.accept(&good[..len]), Err(Rejected::Forged), "{len} bytes");
        }
    }

    #[test]
    fn a_seq_not_above_the_last_accepted_is_replayed() {
        let mut v = Verifier::new(&KEY).unwrap();
        let first = sign(&KEY, 5, MESSAGE);
        assert!(v.accept(&first).is_ok());
        assert_eq!(v.accept(&first), Err(Rejected::Replayed));
        assert_eq!(v.accept(&sign(&KEY, 4, MESSAGE)), Err(Rejected::Replayed));
        assert_eq!(v.accept(&sign(&KEY, 0, MESSAGE)), Err(Rejected::Replayed));
        assert!(v.accept(&sign(&KEY, 6, MESSAGE)).is_ok());
    }

    #[test]
    fn an_authentic_datagram_that_is_not_a_host_message_is_malformed_and_uses_up_its_seq() {
        let mut v = Verifier::new(&KEY).unwrap();
        assert_eq!(v.accept(&sign(&KEY, 5, b"{}")), Err(Rejected::Malformed));
        assert_eq!(v.accept(&sign(&KEY, 5, MESSAGE)), Err(Rejected::Replayed));
    }

    #[test]
    fn a_key_of_another_length_is_refused() {
        let err = Verifier::new(&[1; 16]).err().unwrap();
        assert_eq!(err, "control key: expected 32 bytes, found 16");
    }
}
