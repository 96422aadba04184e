//! Compiles the eBPF programs (bpf/*.bpf.c) with clang into OUT_DIR, where the agent embeds
//! them. Without clang the agent is built without them and says so when asked to run (the
//! simulator does not need it).

use std::path::PathBuf;
use std::process::Command;

const PROGRAMS: [&str; 2] = ["host", "switch"];

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
    for name in PROGRAMS {
        let obj = out.join(format!("{name}.bpf.o"));
        let status = Command::new(&clang)
            .args([
                "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3",
            ])
            .arg(format!("-I/usr/include/{multiarch}"))
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
}
