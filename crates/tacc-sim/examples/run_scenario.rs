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
    let (sim, summary) = tacc_sim::run(prepared, &mut |_, _| {});
    eprintln!("{} events in {:.3} s", summary.events, summary.wall_seconds);
    if let Some(out) = args.get(2) {
        if let Err(e) = tacc_sim::output::write(std::path::Path::new(out), &sim, &summary) {
            eprintln!("cannot write {out}: {e}");
            std::process::exit(1);
        }
    }
}
