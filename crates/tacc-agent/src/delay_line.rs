//! The testbed's links' propagation delay: this kernel has no netem, so a link with a delay is
//! two veth pairs with a wire process between their inner ends, which holds every frame for
//! the link's delay and sends it on unchanged. One thread per direction: it reads the frames
//! that arrive at its inner end (an `AF_PACKET` socket, every protocol), keeps them in arrival
//! order with their due time (constant delay, so the queue is a FIFO), and sends each on the
//! other inner end when it is due. The wire has no rate and no buffer limit: a link's
//! serialization and queue are the htb and bfifo of the veth ends outside it, as in the
//! engine, where a port's delay starts once its packet is serialized.
//!
//! A frame's delay counts from the kernel's receive timestamp, not from when the thread woke
//! to read it, and the thread sleeps until a frame is due less its recent lateness (the
//! timer's and the scheduler's wake-up latency, some tens of microseconds), so that frames
//! leave on time on average rather than always late.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use serde::Deserialize;

use crate::{clock_ns, ifindex, monotonic_ns, signal_ready, sleep_ns};

/// One direction of a delayed link: frames arriving at `from` leave by `to` `delay_ns` later.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Direction {
    pub from: String,
    pub to: String,
    pub delay_ns: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireConfig {
    pub directions: Vec<Direction>,
    pub ready: PathBuf,
}

/// The largest frame (a jumbo frame's): the testbed turns every offload off, so that no
/// frame is longer than the MTU.
const MAX_FRAME: usize = 9_216;
/// A wire direction's receive buffer: a 1 Gb/s burst of 4 ms, far more than a queue holds.
const RCVBUF_BYTES: libc::c_int = 1 << 20;

pub fn run(cfg: WireConfig) -> Result<(), String> {
    let mut lines = Vec::new();
    for d in &cfg.directions {
        let rx = packet_socket(&d.from, libc::ETH_P_ALL as u16)?;
        // Ignore what this socket's own interface sends (the other direction's frames).
        set_int(
            &rx,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
            &d.from,
        )?;
        set_int(
            &rx,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            RCVBUF_BYTES,
            &d.from,
        )?;
        set_int(&rx, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1, &d.from)?;
        let tx = packet_socket(&d.to, 0)?; // protocol 0: it receives nothing
        lines.push((d.clone(), rx, tx));
    }
    signal_ready(&cfg.ready)?;
    let threads: Vec<_> = lines
        .into_iter()
        .map(|(d, rx, tx)| std::thread::spawn(move || forward(&d, &rx, &tx)))
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| "a wire thread panicked".to_string())??;
    }
    Ok(())
}

/// Frames in flight on one direction, in arrival order: the monotonic time each is due, its
/// length and its buffer (of MAX_FRAME bytes, reused).
struct InFlight {
    frames: VecDeque<(u64, usize, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
}

impl InFlight {
    fn buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| vec![0; MAX_FRAME])
    }
}

/// The weight of a wake-up's lateness in the running estimate (1/16: it follows a change of
/// load within a few dozen frames and is not thrown by one late wake-up).
const LATENESS_GAIN: f64 = 1.0 / 16.0;
/// A wake-up later than this (the thread was kept from the CPU) is counted as this late.
const MAX_LATENESS_NS: f64 = 200_000.0;

fn forward(d: &Direction, rx: &OwnedFd, tx: &OwnedFd) -> Result<(), String> {
    let mut line = InFlight {
        frames: VecDeque::new(),
        spare: Vec::new(),
    };
    // The timer's recent lateness: a frame is sent once `now + lateness_ns` reaches its due
    // time, and the thread sleeps until then.
    let mut lateness_ns = timer_lateness_ns();
    loop {
        let now = monotonic_ns();
        let lead = lateness_ns as u64;
        while line
            .frames
            .front()
            .is_some_and(|(due, _, _)| *due <= now + lead)
        {
            let (_, len, frame) = line.frames.pop_front().expect("a due frame");
            // A send refused (the peer's backlog full) is a frame lost on the wire, as a real
            // link would drop it; the wire goes on.
            // SAFETY: a valid socket and `len` bytes of the buffer.
            unsafe { libc::send(tx.as_raw_fd(), frame.as_ptr().cast(), len, 0) };
            line.spare.push(frame);
        }
        // With frames in flight the thread sleeps until the first is due, and reads what
        // arrived meanwhile then (their timestamps say when): a wake-up per due frame, not
        // one more per arrival. With none, it waits for the next arrival.
        match line.frames.front().map(|(due, _, _)| due - lead) {
            Some(wake) => {
                sleep_ns(wake.saturating_sub(now));
                let late = monotonic_ns().saturating_sub(wake) as f64;
                lateness_ns += LATENESS_GAIN * (late.min(MAX_LATENESS_NS) - lateness_ns);
            }
            None => wait_readable(rx),
        }
        // The receive timestamps are CLOCK_REALTIME: moved onto the monotonic clock by the
        // clocks' offset now.
        let offset = clock_ns(libc::CLOCK_REALTIME) as i128 - monotonic_ns() as i128;
        loop {
            let mut buf = line.buffer();
            match receive(rx, &mut buf) {
                Ok(Some((len, stamp))) => {
                    let arrived = stamp.map_or_else(monotonic_ns, |t| (t as i128 - offset) as u64);
                    line.frames.push_back((arrived + d.delay_ns, len, buf));
                }
                Ok(None) => {
                    line.spare.push(buf);
                    break;
                }
                Err(err) => return Err(format!("wire {} -> {}: {err}", d.from, d.to)),
            }
        }
    }
}

/// The median lateness of a few short sleeps: where the running estimate starts, so that the
/// first frames are on time too.
fn timer_lateness_ns() -> f64 {
    const SLEEP_NS: u64 = 200_000;
    let mut late: Vec<u64> = (0..32)
        .map(|_| {
            let start = monotonic_ns();
            sleep_ns(SLEEP_NS);
            monotonic_ns().saturating_sub(start + SLEEP_NS)
        })
        .collect();
    late.sort_unstable();
    late[late.len() / 2] as f64
}

/// One frame from `rx` into `buf` without waiting: its length and its kernel receive
/// timestamp (CLOCK_REALTIME ns) if it carries one; None when no frame is waiting.
fn receive(rx: &OwnedFd, buf: &mut [u8]) -> std::io::Result<Option<(usize, Option<u64>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one SCM_TIMESTAMPNS message, aligned as a cmsghdr must be.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is a valid start.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: a valid socket; msg points at the buffer and the control area above.
    let n = unsafe { libc::recvmsg(rx.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(err),
        };
    }
    let mut stamp = None;
    // SAFETY: the CMSG_* walk stays within msg_controllen, as the kernel filled it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some((n as usize, stamp)))
}

/// Waits until `fd` is readable.
fn wait_readable(fd: &OwnedFd) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, no timeout.
    unsafe { libc::poll(&mut p, 1, -1) };
}

/// An `AF_PACKET` raw socket bound to interface `dev`, receiving frames of `protocol`
/// (host order; 0 for none).
fn packet_socket(dev: &str, protocol: u16) -> Result<OwnedFd, String> {
    let index = ifindex(dev)?;
    // SAFETY: plain socket creation; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        return Err(format!(
            "packet socket on {dev}: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid start.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = index as i32;
    // SAFETY: a valid sockaddr_ll of its size.
    let rc = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(format!(
            "bind to {dev}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(sock)
}

fn set_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
    dev: &str,
) -> Result<(), String> {
    // SAFETY: an int option of its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(format!(
            "socket option {name} on {dev}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
