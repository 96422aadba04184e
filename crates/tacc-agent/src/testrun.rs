//! Runs a loaded program once on a frame (BPF_PROG_TEST_RUN): the kernel executes the real
//! program on the bytes given, on the loopback interface or on one named by its index. Needs
//! root.

use std::os::fd::{AsFd, AsRawFd};

use aya::programs::SchedClassifier;
use aya::Ebpf;

pub const TC_ACT_OK: u32 = 0;
pub const TC_ACT_SHOT: u32 = 2;

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// `struct __sk_buff`: its size and where `priority` and `ifindex` sit (linux/bpf.h).
const SK_BUFF_BYTES: usize = 192;
const SK_BUFF_PRIORITY: usize = 32;
const SK_BUFF_IFINDEX: usize = 40;
const SK_BUFF_MARK: usize = 8;

#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

pub struct Outcome {
    pub verdict: u32,
    pub frame: Vec<u8>,
    pub priority: u32,
}

/// Fails a test that test-runs a program without root. Such tests are `#[ignore]`d with the
/// reason, so that `cargo test` lists them as not run; `make test` runs them as root
/// (`--include-ignored`).
pub fn require_root(test: &str) {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(root, "{test} needs root (BPF_PROG_TEST_RUN)");
}

pub fn run(bpf: &mut Ebpf, program: &str, frame: &[u8]) -> Outcome {
    run_on(bpf, program, frame, 0)
}

/// As [`run`], with the packet on interface `ifindex` (0: the loopback).
pub fn run_on(bpf: &mut Ebpf, program: &str, frame: &[u8], ifindex: u32) -> Outcome {
    run_marked(bpf, program, frame, ifindex, 0)
}

/// As [`run_on`], the packet carrying skb->mark `mark`.
pub fn run_marked(bpf: &mut Ebpf, program: &str, frame: &[u8], ifindex: u32, mark: u32) -> Outcome {
    let prog: &mut SchedClassifier = bpf
        .program_mut(program)
        .unwrap_or_else(|| panic!("no program {program}"))
        .try_into()
        .unwrap();
    let fd = prog.fd().unwrap().as_fd().as_raw_fd();
    let mut out = vec![0u8; frame.len() + 256];
    let mut ctx_in = [0u8; SK_BUFF_BYTES];
    ctx_in[SK_BUFF_IFINDEX..SK_BUFF_IFINDEX + 4].copy_from_slice(&ifindex.to_ne_bytes());
    ctx_in[SK_BUFF_MARK..SK_BUFF_MARK + 4].copy_from_slice(&mark.to_ne_bytes());
    let mut ctx_out = [0u8; SK_BUFF_BYTES];
    let mut attr = TestRunAttr {
        prog_fd: fd as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ctx_size_in: SK_BUFF_BYTES as u32,
        ctx_size_out: SK_BUFF_BYTES as u32,
        ctx_in: ctx_in.as_ptr() as u64,
        ctx_out: ctx_out.as_mut_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: every pointer in attr refers to a live buffer of the size given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestRunAttr,
            std::mem::size_of::<TestRunAttr>(),
        )
    };
    assert_eq!(
        rc,
        0,
        "BPF_PROG_TEST_RUN: {}",
        std::io::Error::last_os_error()
    );
    out.truncate(attr.data_size_out as usize);
    let priority = u32::from_ne_bytes(
        ctx_out[SK_BUFF_PRIORITY..SK_BUFF_PRIORITY + 4]
            .try_into()
            .unwrap(),
    );
    Outcome {
        verdict: attr.retval,
        frame: out,
        priority,
    }
}

/// An Ethernet frame around an IPv4 packet.
pub fn frame(ip: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f.extend_from_slice(ip);
    f
}
