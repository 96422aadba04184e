//! tacc's Linux agents. The per-packet work of a mechanism runs in eBPF programs on tc hooks
//! (`bpf/`); the agents load and attach them, read their counters, and run the mechanism's
//! `tacc-mech` state machine on its timers, writing rates and flags back through BPF maps and
//! HTB classes:
//! - [`host`]: one per hypervisor namespace, under its VMs (the host shim of `roles`);
//! - [`switch`]: one per switch namespace, the ports' ECN marking and counters;
//! - [`daemon`]: the host agent as a daemon on a real hypervisor (`tacc agent`);
//! - [`delay_line`]: the links' propagation delays (the `wire` role; no eBPF: a frame
//!   forwarder).
//!
//! An agent is started with a JSON configuration that carries the scenario's [`Plan`], so it
//! builds its mechanism from the same keys as the simulator. It runs until it is killed, and it
//! fails open: the programs, maps and classes it set up stay in the kernel, at their last
//! values, when it dies.

mod caps;
pub mod channel;
mod control;
pub mod daemon;
pub mod delay_line;
pub mod host;
mod metrics;
mod records;
pub mod switch;
mod tc;
#[cfg(test)]
mod testrun;

use std::path::Path;
use std::time::Duration;

pub use tacc_mech::plan::Plan;

/// The eBPF objects, compiled by build.rs (empty when clang was missing).
// Aligned: the ELF parser reads the object in place.
const HOST_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host.bpf.o"));
/// The same with every map pinned by name (`tacc agent`).
const HOST_PINNED_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host-pinned.bpf.o"));
const SWITCH_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/switch.bpf.o"));

const DCTCP_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dctcp.bpf.o"));

/// The BPF DCTCP (a `tcp_congestion_ops` struct_ops named "dctcp", registered with bpftool
/// on kernels without the module); empty if the build could not have it.
pub fn dctcp_object() -> &'static [u8] {
    DCTCP_OBJECT
}

/// True if the agent was built with its eBPF programs.
pub fn has_programs() -> bool {
    !HOST_OBJECT.is_empty() && !SWITCH_OBJECT.is_empty()
}

/// Runs the agent of `role` ("host", "switch" or "wire") with its JSON configuration, until
/// killed.
pub fn run(role: &str, config: &str) -> Result<(), String> {
    if role == "wire" {
        return delay_line::run(serde_json::from_str(config).map_err(|e| format!("config: {e}"))?);
    }
    if !has_programs() {
        return Err("tacc was built without its eBPF programs (clang was missing)".into());
    }
    match role {
        "host" => host::run(serde_json::from_str(config).map_err(|e| format!("config: {e}"))?),
        "switch" => switch::run(serde_json::from_str(config).map_err(|e| format!("config: {e}"))?),
        other => Err(format!(
            "unknown agent role {other:?} (expected host, switch or wire)"
        )),
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The clock `id` (CLOCK_MONOTONIC, CLOCK_REALTIME, ...) in nanoseconds.
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A mechanism's clock: nanoseconds since the run's start, running at `time_scale` times real
/// time. The testbed can dilate a mechanism's time by the rate scale: its links then run
/// that many times slower, so queues fill and drain that much slower, and a timer of the
/// scenario's length would tick that many times more often against them, with that many
/// times fewer packets (and marks) per tick.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start_mono_ns: u64,
    time_scale: f64,
}

impl Clock {
    pub fn new(start_mono_ns: u64, time_scale: f64) -> Clock {
        Clock {
            start_mono_ns,
            time_scale,
        }
    }

    /// Real nanoseconds since the start.
    pub fn elapsed(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_mono_ns)
    }

    /// The mechanism's time now.
    pub fn now(&self) -> u64 {
        self.at(self.elapsed())
    }

    /// The mechanism's time when `elapsed` real nanoseconds have passed since the start.
    pub fn at(&self, elapsed: u64) -> u64 {
        (elapsed as f64 * self.time_scale) as u64
    }

    /// The real nanoseconds `ns` of the mechanism's time take.
    pub fn real(&self, ns: u64) -> u64 {
        (ns as f64 / self.time_scale).min(u64::MAX as f64) as u64
    }

    /// The mechanism's moment `t` on CLOCK_MONOTONIC (the BPF programs' clock).
    pub fn monotonic(&self, t: u64) -> u64 {
        self.start_mono_ns.saturating_add(self.real(t))
    }
}

/// Puts the calling thread under SCHED_FIFO at `priority`; says so on stderr where the kernel
/// refuses it (a container's cgroup) and goes on at the priority it has.
fn realtime(priority: u8) {
    let param = libc::sched_param {
        sched_priority: priority.into(),
    };
    // SAFETY: sched_setscheduler reads the sched_param it is given; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        eprintln!(
            "tacc agent: real-time priority {priority} refused ({}); running at normal priority",
            std::io::Error::last_os_error()
        );
    }
}

fn sleep_ns(ns: u64) {
    std::thread::sleep(Duration::from_nanos(ns));
}

/// Sleeps until one of `fds` is readable or `ns` have passed; true if one is.
fn wait_readable(fds: &[std::os::fd::RawFd], ns: u64) -> bool {
    if fds.is_empty() {
        sleep_ns(ns);
        return false;
    }
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `polled` is a valid array of its length, a valid timespec, no signal mask.
    unsafe {
        libc::ppoll(
            polled.as_mut_ptr(),
            polled.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        ) > 0
    }
}

/// Tells the starter that the datapath is in place.
fn signal_ready(path: &Path) -> Result<(), String> {
    std::fs::write(path, format!("{}\n", std::process::id()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn ifindex(name: &str) -> Result<u32, String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("bad interface name {name:?}"))?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(format!("no interface {name}")),
        i => Ok(i),
    }
}

fn default_scale() -> f64 {
    1.0
}

fn take_map<T>(bpf: &mut aya::Ebpf, name: &str) -> Result<T, String>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    bpf.take_map(name)
        .ok_or_else(|| format!("no map {name}"))?
        .try_into()
        .map_err(|e| format!("map {name}: {e}"))
}
