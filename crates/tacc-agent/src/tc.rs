//! Attaching programs to tc hooks, and a `tc -batch` process for HTB class changes (one
//! process for the agent's life: a rate update is a line, not a fork).

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

use aya::programs::tc::{self, NlOptions, TcAttachOptions};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::Ebpf;

/// Loads programs into the kernel. Before any map is taken out of `bpf`: the programs refer
/// to their maps by the descriptors `bpf` holds.
pub fn load(bpf: &mut Ebpf, names: &[&str]) -> Result<(), String> {
    for name in names {
        let prog: &mut SchedClassifier = bpf
            .program_mut(name)
            .ok_or_else(|| format!("no program {name}"))?
            .try_into()
            .map_err(|e| format!("{name}: {e}"))?;
        prog.load().map_err(|e| format!("loading {name}: {e:?}"))?;
    }
    Ok(())
}

/// Attaches program `name` of `bpf` (loaded) to `ifname`'s `hook` as a tc filter (netlink, not a TCX
/// link): the filter belongs to the interface, so it stays when the agent dies (fails open)
/// and goes with the namespace.
pub fn attach(bpf: &mut Ebpf, name: &str, ifname: &str, hook: TcAttachType) -> Result<(), String> {
    match tc::qdisc_add_clsact(ifname) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("clsact on {ifname}: {e}")),
    }
    let prog: &mut SchedClassifier = bpf
        .program_mut(name)
        .ok_or_else(|| format!("no program {name}"))?
        .try_into()
        .map_err(|e| format!("{name}: {e}"))?;
    let link = prog
        .attach_with_options(ifname, hook, TcAttachOptions::Netlink(NlOptions::default()))
        .map_err(|e| format!("attaching {name} to {ifname}: {e}"))?;
    // Ours no longer: dropping the link would detach it.
    std::mem::forget(prog.take_link(link).map_err(|e| format!("{name}: {e}"))?);
    Ok(())
}

/// Class changes on one interface's HTB, through a long-lived `tc -batch -`.
pub struct Htb {
    dev: String,
    tc: Child,
    stdin: ChildStdin,
}

/// Every class the agent makes hangs under the root class 1:1 (the NIC's rate), made by the
/// testbed beside its default leaf 1:2.
const PARENT: &str = "1:1";

impl Htb {
    pub fn new(dev: &str) -> Result<Htb, String> {
        let mut tc = Command::new("tc")
            .args(["-force", "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run tc: {e}"))?;
        let stdin = tc.stdin.take().expect("piped");
        Ok(Htb {
            dev: dev.to_string(),
            tc,
            stdin,
        })
    }

    fn line(&mut self, line: String) -> Result<(), String> {
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("tc batch: {e}"))
    }

    /// A new leaf class 1:`minor` at `rate_bps` with a burst of `burst_bytes` and a byte FIFO
    /// of `limit_bytes` under it.
    pub fn add(
        &mut self,
        minor: u16,
        rate_bps: u64,
        burst_bytes: u64,
        limit_bytes: u64,
    ) -> Result<(), String> {
        let dev = self.dev.clone();
        self.line(format!(
            "class add dev {dev} parent {PARENT} classid 1:{minor:x} htb {}",
            rate_args(rate_bps, burst_bytes)
        ))?;
        self.line(format!(
            "qdisc add dev {dev} parent 1:{minor:x} handle {minor:x}: bfifo limit {limit_bytes}"
        ))
    }

    pub fn change(&mut self, minor: u16, rate_bps: u64, burst_bytes: u64) -> Result<(), String> {
        let dev = self.dev.clone();
        self.line(format!(
            "class change dev {dev} parent {PARENT} classid 1:{minor:x} htb {}",
            rate_args(rate_bps, burst_bytes)
        ))
    }
}

/// HTB's rate and ceiling (the same: a limiter, not a share) and burst.
fn rate_args(rate_bps: u64, burst_bytes: u64) -> String {
    let rate = rate_bps.max(8_000);
    format!("rate {rate}bit ceil {rate}bit burst {burst_bytes} cburst {burst_bytes} quantum 1514")
}

impl Drop for Htb {
    fn drop(&mut self) {
        let _ = self.tc.kill();
        let _ = self.tc.wait();
    }
}
