//! `tacc agent`'s channel to its controller over TCP: the agent connects (again and again,
//! with backoff, while it runs), both sides prove they hold the host's key, and the
//! controller's `HostMessage`s arrive signed with a key of that session alone.
//!
//! ```text
//! agent -> controller   "TACC1" || nonce_a (16) || name length (1) || host name
//! controller -> agent   nonce_c (16) || HMAC(key, "controller" || nonce_a || nonce_c)
//! agent -> controller   HMAC(key, "agent" || nonce_c || nonce_a)
//! controller -> agent   frames: length (4, big-endian) || mac (32) || seq (8) || message JSON
//!                       mac = HMAC(session, seq || message), seq above the last accepted,
//!                       session = HMAC(key, "session" || nonce_a || nonce_c)
//! ```
//!
//! A message is a `HostMessage`, or `"InControl"`: the controller has its switches, sent on
//! every session once it has (an agent back from an outage holds its rates until then).
//!
//! A message recorded in one session verifies in no other, so a replay fails after a
//! reconnection or a restart of either side as well as within the session. A frame that does
//! not verify ends the session (the agent reconnects); the counts say why.
//!
//! A thread of its own keeps the connection, so the shim never waits on the network; the
//! agent's loop takes the messages from a queue and asks how long the channel has been down.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tacc_mech::control::HostMessage;

use crate::control::{Rejected, Verifier, KEY_LEN};

const MAGIC: &[u8; 5] = b"TACC1";
pub(crate) const NONCE_LEN: usize = 16;
pub(crate) const MAC_LEN: usize = 32;
/// The largest frame taken: a HostMessage's JSON is under 200 bytes.
const MAX_FRAME: u32 = 4096;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const FIRST_RETRY: Duration = Duration::from_millis(250);

#[derive(Clone, Debug)]
pub struct ChannelConfig {
    /// `host:port` of the controller.
    pub address: String,
    pub key: Vec<u8>,
    /// The longest wait between two connection attempts (the backoff doubles up to it).
    pub retry_max: Duration,
    /// The name the agent gives in its greeting (the controller picks the key by it).
    pub host: String,
}

/// What the channel did, for the agent's counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelCounts {
    pub connects: u64,
    pub handshake_failures: u64,
    pub notify: u64,
    pub incast: u64,
    pub forged: u64,
    pub replayed: u64,
    pub malformed: u64,
}

impl ChannelCounts {
    pub fn each(&self, out: &mut dyn FnMut(&'static str, f64)) {
        out("controller_connects", self.connects as f64);
        out(
            "controller_handshake_failures",
            self.handshake_failures as f64,
        );
        out("control_notify", self.notify as f64);
        out("control_incast", self.incast as f64);
        out("control_forged", self.forged as f64);
        out("control_replayed", self.replayed as f64);
        out("control_malformed", self.malformed as f64);
    }
}

#[derive(Default)]
struct Shared {
    counts: ChannelCounts,
    /// Since when no session is up (`None`: one is).
    down_since: Option<Instant>,
    /// The session up said its controller is in control.
    in_control: bool,
}

/// What a frame carries.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Frame {
    Message(HostMessage),
    Signal(Signal),
}

#[derive(serde::Deserialize)]
enum Signal {
    InControl,
}

/// The agent's end: messages in, and the channel's state.
pub struct Channel {
    messages: Receiver<HostMessage>,
    shared: Arc<Mutex<Shared>>,
}

impl Channel {
    /// Starts the thread that keeps the connection.
    pub fn start(cfg: ChannelConfig) -> Result<Channel, String> {
        if cfg.key.len() != KEY_LEN {
            return Err(format!(
                "controller key: expected {KEY_LEN} bytes, found {}",
                cfg.key.len()
            ));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Mutex::new(Shared {
            down_since: Some(Instant::now()),
            ..Shared::default()
        }));
        let for_thread = shared.clone();
        std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || keep_connected(&cfg, &tx, &for_thread))
            .map_err(|e| format!("controller channel: {e}"))?;
        Ok(Channel {
            messages: rx,
            shared,
        })
    }

    /// Every message that arrived since the last call.
    pub fn drain(&self, deliver: &mut dyn FnMut(&HostMessage)) {
        while let Ok(m) = self.messages.try_recv() {
            deliver(&m);
        }
    }

    /// How long no session has been up (`None`: one is).
    pub fn down_for(&self) -> Option<Duration> {
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.down_since.map(|t| t.elapsed())
    }

    /// Whether the controller of the session up said it is in control.
    pub fn in_control(&self) -> bool {
        with(&self.shared, |s| s.in_control)
    }

    pub fn counts(&self) -> ChannelCounts {
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).counts
    }
}

fn with<T>(shared: &Mutex<Shared>, f: impl FnOnce(&mut Shared) -> T) -> T {
    f(&mut shared.lock().unwrap_or_else(|e| e.into_inner()))
}

fn keep_connected(cfg: &ChannelConfig, tx: &Sender<HostMessage>, shared: &Mutex<Shared>) {
    let mut backoff = FIRST_RETRY;
    loop {
        match session(cfg, tx, shared) {
            // A session that got up resets the backoff.
            Ok(()) => backoff = FIRST_RETRY,
            Err(Ended::Handshake) => with(shared, |s| s.counts.handshake_failures += 1),
            Err(Ended::Unreachable) => {}
        }
        with(shared, |s| {
            s.down_since.get_or_insert_with(Instant::now);
        });
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(cfg.retry_max);
    }
}

enum Ended {
    Unreachable,
    Handshake,
}

pub(crate) fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    // SAFETY: getrandom writes at most the buffer's length.
    let got = unsafe { libc::getrandom(n.as_mut_ptr().cast(), NONCE_LEN, 0) };
    assert_eq!(got, NONCE_LEN as isize, "getrandom");
    n
}

/// One session: connect, prove, then deliver messages until the connection ends or a frame
/// fails to verify. Ok if the session got up.
fn session(
    cfg: &ChannelConfig,
    tx: &Sender<HostMessage>,
    shared: &Mutex<Shared>,
) -> Result<(), Ended> {
    let addr = cfg
        .address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or(Ended::Unreachable)?;
    let mut s =
        TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|_| Ended::Unreachable)?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|_| Ended::Unreachable)?;
    let nonce_a = nonce();
    let name = cfg.host.as_bytes();
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&nonce_a);
    hello.push(name.len().min(255) as u8);
    hello.extend_from_slice(&name[..name.len().min(255)]);
    s.write_all(&hello).map_err(|_| Ended::Unreachable)?;
    let mut reply = [0u8; NONCE_LEN + MAC_LEN];
    s.read_exact(&mut reply).map_err(|_| Ended::Handshake)?;
    let (nonce_c, proof) = reply.split_at(NONCE_LEN);
    let expected = mac(&cfg.key, &[b"controller", &nonce_a, nonce_c]);
    if !constant_time_eq(&expected, proof) {
        return Err(Ended::Handshake);
    }
    s.write_all(&mac(&cfg.key, &[b"agent", nonce_c, &nonce_a]))
        .map_err(|_| Ended::Handshake)?;
    let session_key = mac(&cfg.key, &[b"session", &nonce_a, nonce_c]);
    let mut verifier = Verifier::new(&session_key).expect("32 bytes");
    // Up: messages may be far apart, so no read timeout from here on.
    let _ = s.set_read_timeout(None);
    with(shared, |sh| {
        sh.counts.connects += 1;
        sh.down_since = None;
        sh.in_control = false;
    });
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            return Ok(());
        }
        let len = u32::from_be_bytes(len);
        if len > MAX_FRAME {
            with(shared, |sh| sh.counts.forged += 1);
            return Ok(());
        }
        let mut frame = vec![0u8; len as usize];
        if s.read_exact(&mut frame).is_err() {
            return Ok(());
        }
        match verifier.accept_as(&frame) {
            Ok(Frame::Signal(Signal::InControl)) => with(shared, |sh| sh.in_control = true),
            Ok(Frame::Message(msg)) => {
                with(shared, |sh| match msg {
                    HostMessage::Congestion(_) => sh.counts.notify += 1,
                    HostMessage::Incast(_) => sh.counts.incast += 1,
                });
                if tx.send(msg).is_err() {
                    return Ok(());
                }
            }
            Err(kind) => {
                with(shared, |sh| match kind {
                    Rejected::Forged => sh.counts.forged += 1,
                    Rejected::Replayed => sh.counts.replayed += 1,
                    Rejected::Malformed => sh.counts.malformed += 1,
                });
                // A forged or replayed frame means the stream is not the controller's alone.
                if kind != Rejected::Malformed {
                    return Ok(());
                }
            }
        }
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    //! The agent's end against a controller's written here from the protocol above.
    use super::*;
    use std::net::TcpListener;
    use tacc_mech::control::Notify;

    const KEY: [u8; 32] = [7; 32];

    /// Accepts one agent, proves `key` (the controller's side), and returns the stream and
    /// the session key, or None if the agent's proof fails.
    fn controller_handshake(l: &TcpListener, key: &[u8]) -> Option<(TcpStream, [u8; 32])> {
        let (mut s, _) = l.accept().unwrap();
        let mut hello = [0u8; 5 + NONCE_LEN + 1];
        s.read_exact(&mut hello).unwrap();
        assert_eq!(&hello[..5], MAGIC);
        let nonce_a = hello[5..5 + NONCE_LEN].to_vec();
        let mut name = vec![0u8; hello[5 + NONCE_LEN] as usize];
        s.read_exact(&mut name).unwrap();
        assert_eq!(name, b"hv1");
        let nonce_c = [9u8; NONCE_LEN];
        s.write_all(&nonce_c).unwrap();
        s.write_all(&mac(key, &[b"controller", &nonce_a, &nonce_c]))
            .unwrap();
        let mut proof = [0u8; MAC_LEN];
        s.read_exact(&mut proof).ok()?;
        (proof == mac(key, &[b"agent", &nonce_c, &nonce_a]))
            .then(|| (s, mac(key, &[b"session", &nonce_a, &nonce_c])))
    }

    fn frame(session: &[u8], seq: u64, msg: &impl serde::Serialize) -> Vec<u8> {
        let mut signed = seq.to_be_bytes().to_vec();
        signed.extend_from_slice(&serde_json::to_vec(msg).unwrap());
        let mut f = mac(session, &[&signed]).to_vec();
        f.extend_from_slice(&signed);
        let mut out = (f.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&f);
        out
    }

    fn notify(marks: f64) -> HostMessage {
        HostMessage::Congestion(Notify {
            to_src: 1,
            from_dst: 2,
            marks,
        })
    }

    fn start(l: &TcpListener) -> Channel {
        Channel::start(ChannelConfig {
            address: l.local_addr().unwrap().to_string(),
            key: KEY.to_vec(),
            retry_max: Duration::from_millis(300),
            host: "hv1".into(),
        })
        .unwrap()
    }

    fn wait_for(ch: &Channel, what: impl Fn(&ChannelCounts) -> bool) -> ChannelCounts {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what(&ch.counts()) {
            assert!(Instant::now() < deadline, "{:?}", ch.counts());
            std::thread::sleep(Duration::from_millis(10));
        }
        ch.counts()
    }

    #[test]
    fn messages_arrive_in_a_session_and_a_replay_in_the_next_session_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ch = start(&l);
        let (mut s, session) = controller_handshake(&l, &KEY).unwrap();
        wait_for(&ch, |c| c.connects == 1);
        assert_eq!(ch.down_for(), None);
        let first = frame(&session, 5, &notify(3.0));
        s.write_all(&first).unwrap();
        wait_for(&ch, |c| c.notify == 1);
        let mut got = Vec::new();
        ch.drain(&mut |m| got.push(*m));
        assert_eq!(got, [notify(3.0)]);
        // The same frame again in the session: replayed, and the session ends.
        s.write_all(&first).unwrap();
        wait_for(&ch, |c| c.replayed == 1);
        assert!(ch.down_for().is_some());
        // The agent reconnects; the frame of the old session does not verify in the new one.
        let (mut s2, _) = controller_handshake(&l, &KEY).unwrap();
        wait_for(&ch, |c| c.connects == 2);
        s2.write_all(&first).unwrap();
        let c = wait_for(&ch, |c| c.forged == 1);
        assert_eq!(c.notify, 1);
        drop(s);
    }

    #[test]
    fn in_control_is_said_once_per_session_and_is_no_message_for_the_shim() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ch = start(&l);
        let (mut s, session) = controller_handshake(&l, &KEY).unwrap();
        wait_for(&ch, |c| c.connects == 1);
        assert!(!ch.in_control());
        s.write_all(&frame(&session, 1, &"InControl")).unwrap();
        s.write_all(&frame(&session, 2, &notify(1.0))).unwrap();
        wait_for(&ch, |c| c.notify == 1);
        assert!(ch.in_control());
        let mut got = Vec::new();
        ch.drain(&mut |m| got.push(*m));
        assert_eq!(got, [notify(1.0)]);
        // A new session starts without it.
        drop(s);
        let (_s2, _) = controller_handshake(&l, &KEY).unwrap();
        wait_for(&ch, |c| c.connects == 2);
        assert!(!ch.in_control());
        assert_eq!(ch.counts().malformed, 0);
    }

    #[test]
    fn a_controller_without_the_key_gets_no_session() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ch = start(&l);
        assert!(controller_handshake(&l, &[8; 32]).is_none());
        let c = wait_for(&ch, |c| c.handshake_failures >= 1);
        assert_eq!(c.connects, 0);
        assert!(ch.down_for().is_some());
    }
}
