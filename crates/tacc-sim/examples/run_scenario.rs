//! Runs one scenario file without Python (for profiling): `cargo run --release --example
//! run_scenario -- FILE [OUT_DIR]`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(file) = args.get(1) else {
        eprintln!("usage: run_scenario FILE [OUT_DIR]");
        std::process::exit(2);
    };
    let prepared = tacc_sim::read_scenario(std::path::Path::new(file))
        .and_then(|text| tacc_sim::load(&text, file, &[], None));
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let t0 = std::time::Instant::now();
    let events = match args.get(2) {
        Some(out) => {
            match tacc_sim::run_into(prepared, std::path::Path::new(out), &mut |_, _| {}) {
                Ok(s) => s.events,
                Err(e) => {
                    eprintln!("cannot write {out}: {e}");
                    std::process::exit(1);
                }
            }
        }
        None => tacc_sim::run(prepared, &mut |_, _| {}).1.events,
    };
    eprintln!("{events} events in {:.3} s", t0.elapsed().as_secs_f64());
}
