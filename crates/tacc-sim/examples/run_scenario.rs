//! Runs one scenario file without Python (for profiling and for the profile-guided build):
//! `cargo run --release --example run_scenario -- FILE [OUT_DIR] [--set KEY=VALUE ...]
//! [--threads N] [--partitions N]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let mut positional = Vec::new();
    let mut sets = Vec::new();
    let mut opts = tacc_sim::RunOptions::default();
    while let Some(a) = args.next() {
        if a == "--threads" || a == "--partitions" {
            let n = args.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0);
            let Some(n) = n else {
                eprintln!("{a} needs a positive number");
                usage();
            };
            match a.as_str() {
                "--threads" => opts.threads = n,
                _ => opts.partitions = Some(n),
            }
        } else if a == "--set" {
            let kv = args.next().unwrap_or_default();
            let Some((k, v)) = kv.split_once('=') else {
                eprintln!("--set needs KEY=VALUE, got {kv:?}");
                usage();
            };
            sets.push((k.to_string(), v.to_string()));
        } else if a.starts_with('-') || positional.len() == 2 {
            eprintln!("unexpected argument {a:?}");
            usage();
        } else {
            positional.push(a);
        }
    }
    let Some(file) = positional.first() else {
        usage();
    };
    let prepared = tacc_sim::read_scenario(std::path::Path::new(file))
        .map_err(tacc_sim::scenario::ScenarioErrors::from)
        .and_then(|text| tacc_sim::load(&text, file, &sets, None));
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let t0 = std::time::Instant::now();
    let events = match positional.get(1) {
        Some(out) => {
            match tacc_sim::run_into(prepared, std::path::Path::new(out), opts, &mut |_, _| {}) {
                Ok(s) => s.events,
                Err(e) => {
                    eprintln!("cannot write {out}: {e}");
                    std::process::exit(1);
                }
            }
        }
        None => tacc_sim::run(prepared, opts, &mut |_, _| {}).1.events,
    };
    eprintln!("{events} events in {:.3} s", t0.elapsed().as_secs_f64());
}

fn usage() -> ! {
    eprintln!(
        "usage: run_scenario FILE [OUT_DIR] [--set KEY=VALUE ...] [--threads N] [--partitions N]"
    );
    std::process::exit(2);
}
