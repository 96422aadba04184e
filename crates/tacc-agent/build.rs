//! Compiles the eBPF programs (bpf/*.bpf.c) with clang into OUT_DIR, where the agent embeds
//! them. Without clang the agent is built without them and says so when asked to run (the
//! simulator does not need it). The BPF DCTCP needs the kernel's types too (vmlinux.h, from
//! the running kernel's BTF by bpftool); without them it is left out, and the testbed says so
//! when a scenario asks for DCTCP on a kernel without the module.

use std::path::PathBuf;
use std::process::Command;

/// (source in bpf/, object, extra clang flags): the host programs a second time with their
/// maps pinned by name, for `tacc agent`.
const PROGRAMS: [(&str, &str, &[&str]); 3] = [
    ("host", "host", &[]),
    ("host", "host-pinned", &["-DPIN_MAPS"]),
    ("switch", "switch", &[]),
];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // linux/types.h includes asm/types.h, which Debian keeps under the multiarch directory.
    let multiarch = Command::new("gcc")
        .arg("-dumpmachine")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut built = true;
    for (name, object, flags) in PROGRAMS {
        let obj = out.join(format!("{object}.bpf.o"));
        let status = Command::new(&clang)
            .args([
                "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3",
            ])
            .arg(format!("-I/usr/include/{multiarch}"))
            .args(flags)
            .arg("-c")
            .arg(format!("bpf/{name}.bpf.c"))
            .arg("-o")
            .arg(&obj)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("clang failed on bpf/{name}.bpf.c ({s})"),
            Err(_) => {
                built = false;
                std::fs::write(&obj, b"").unwrap();
            }
        }
    }
    if !built {
        println!("cargo:warning=clang not found: tacc-agent is built without its eBPF programs");
    }
    let dctcp = out.join("dctcp.bpf.o");
    if !(built && build_dctcp(&clang, &out, &dctcp)) {
        std::fs::write(&dctcp, b"").unwrap();
    }
}

/// The BPF DCTCP, compiled against the running kernel's types; false if they cannot be had.
fn build_dctcp(clang: &str, out: &std::path::Path, obj: &std::path::Path) -> bool {
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux");
    let Ok(dump) = Command::new("bpftool")
        .args(["btf", "dump", "file"])
        .arg(btf)
        .args(["format", "c"])
        .output()
    else {
        println!("cargo:warning=bpftool not found: tacc is built without its BPF DCTCP");
        return false;
    };
    if !dump.status.success() {
        println!("cargo:warning=no kernel BTF: tacc is built without its BPF DCTCP");
        return false;
    }
    std::fs::write(out.join("vmlinux.h"), dump.stdout).unwrap();
    // bpf_tracing.h names architectures as the kernel does.
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH")
        .unwrap_or_default()
        .as_str()
    {
        "aarch64" => "arm64".to_string(),
        "x86_64" | "" => "x86".to_string(),
        other => other.to_string(),
    };
    let status = Command::new(clang)
        .args([
            "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3",
        ])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I")
        .arg(out)
        .args(["-c", "bpf/dctcp.bpf.c", "-o"])
        .arg(obj)
        .status()
        .expect("clang ran for the other programs");
    assert!(status.success(), "clang failed on bpf/dctcp.bpf.c");
    true
}
