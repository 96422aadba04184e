//! Least privilege for `tacc agent`: once its programs are loaded and attached and its sockets
//! open, the agent keeps only what it needs to go on: CAP_NET_ADMIN (attaching to new VM
//! ports, HTB classes, detaching at the end) and CAP_BPF (every bpf() call on its maps, on
//! kernels that restrict bpf() to it; CAP_SYS_ADMIN where the kernel predates CAP_BPF). The
//! bounding set loses the rest too, so the `tc` it runs gets no more.

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The highest capability this kernel knows.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(CAP_SYS_ADMIN)
}

/// Drops every capability but the agent's from the bounding, permitted, effective and
/// inheritable sets of this process (every thread: call it before starting any); returns the
/// names of those kept.
pub fn drop_all_but_the_agents() -> Result<Vec<&'static str>, String> {
    let last_cap = last_cap();
    let kept = if last_cap >= CAP_BPF {
        [("CAP_NET_ADMIN", CAP_NET_ADMIN), ("CAP_BPF", CAP_BPF)]
    } else {
        [
            ("CAP_NET_ADMIN", CAP_NET_ADMIN),
            ("CAP_SYS_ADMIN", CAP_SYS_ADMIN),
        ]
    };
    let keep = kept.map(|(_, c)| c);
    for cap in (0..=last_cap).filter(|c| !keep.contains(c)) {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(format!(
                "dropping capability {cap} from the bounding set: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    let mut data = [Data::default(); 2];
    for cap in keep {
        let word = &mut data[(cap / 32) as usize];
        word.effective |= 1 << (cap % 32);
        word.permitted |= 1 << (cap % 32);
    }
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads one header and two data words, which outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if rc != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    Ok(kept.map(|(name, _)| name).to_vec())
}
