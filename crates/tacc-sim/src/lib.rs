//! tacc's packet-level data-center network simulator.
//!
//! Layers, bottom up:
//! - [`units`], [`rng`]: values with units, the run's one seeded RNG.
//! - [`packet`]: packets with the header fields mechanisms read and write; a packet arena.
//! - [`tcp`], [`cc`]: a TCP endpoint state machine (handshake, SACK recovery, RTO, ECN, rwnd)
//!   and its congestion controls (NewReno, Cubic, DCTCP).
//! - [`queue`]: port queue disciplines (drop-tail, RED-ECN at K, classic RED).
//! - [`scenario`], [`keys`], [`validate`], [`topology`], [`model`]: TOML schema, every key's
//!   doc, unit, default and range, the semantic checks, topology builders and routing, and the
//!   world built from a checked scenario.
//! - [`event_queue`], [`sim`]: the event loop: (time, insertion sequence) ordered, integer
//!   nanoseconds.
//! - [`output`]: summary.json and CSV tables; [`pcap`]: packet captures of ports.
//! - [`workload`]: a scenario's open-loop flows and their paths, drawn without a run.
//!
//! A run is a pure function of (scenario text, overrides, seed).

pub mod build;
pub mod cc;
pub mod event_queue;
pub mod fifo;
pub mod heap;
pub mod keys;
pub mod loss;
pub mod mechanism;
pub mod model;
pub mod output;
pub mod packet;
pub mod parallel;
pub mod pcap;
pub mod plan;
pub mod queue;
pub mod rng;
pub mod rules;
pub mod scenario;
pub mod sim;
pub mod tcp;
pub mod topology;
pub use tacc_mech::units;
pub mod validate;
pub mod workload;

use scenario::{ScenarioError, ScenarioErrors};
use std::path::Path;

/// What a caller gets back from [`load`]: the checked world, ready to run.
pub struct Prepared {
    /// The world, or in a partitioned run its first partition's copy: the others are built
    /// from `loaded`, so a caller that changes it runs one partition (`RunOptions`).
    pub model: model::Model,
    pub file: String,
    pub mechanism: tacc_mech::MechanismConfig,
    /// The `[mechanism]` keys the file gives.
    pub mechanism_keys: Vec<String>,
    /// The scenario's `[tcp]` table with its defaults filled in (flows may override parts).
    pub tcp: tcp::TcpConfig,
    /// The checked scenario and the run's seed: a partitioned run builds a copy of the world
    /// per partition from them.
    pub loaded: scenario::Loaded,
    pub seed: u64,
}

/// How a run uses the machine. Neither changes what it writes, only how fast.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Threads to run the partitions on.
    pub threads: usize,
    /// The most partitions to split the run into (1: none; `None`: as many as the
    /// fabric of 1,024 hosts or more gets 2). They change the order of simultaneous events and the random
    /// streams, as another seed would; the threads change nothing.
    pub partitions: Option<usize>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            partitions: None,
        }
    }
}

/// Parses and checks a scenario, reporting every error found; `seed` overrides the file's seed.
pub fn load(
    text: &str,
    file: &str,
    sets: &[(String, String)],
    seed: Option<u64>,
) -> Result<Prepared, ScenarioErrors> {
    let parsed = scenario::parse(text, file, sets);
    let mut errors = parsed.errors;
    if let Some(loaded) = &parsed.loaded {
        let semantic = validate::check(loaded);
        // One error per key: the parser's, where it refused the key.
        let refused: Vec<String> = errors.iter().map(|e| e.field.clone()).collect();
        errors.extend(semantic.into_iter().filter(|e| !refused.contains(&e.field)));
    }
    let Some(loaded) = parsed.loaded.filter(|_| errors.is_empty()) else {
        return Err(ScenarioErrors::new(errors));
    };
    let seed = seed.unwrap_or(loaded.scenario.seed);
    let model = model::Model::build(&loaded, seed)?;
    Ok(Prepared {
        model,
        file: file.to_string(),
        mechanism: loaded.scenario.mechanism.clone(),
        mechanism_keys: loaded.scenario.mechanism_keys.clone(),
        tcp: model::Model::tcp_config(&loaded.scenario.tcp, None, None),
        loaded,
        seed,
    })
}

/// Reads a scenario file; I/O errors become scenario errors naming the file.
pub fn read_scenario(path: &Path) -> Result<String, ScenarioError> {
    std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: path.display().to_string(),
        line: None,
        field: String::new(),
        message: format!("cannot read the scenario: {e}"),
    })
}

/// Runs a prepared scenario to completion, keeping every sample in memory (and capturing
/// nothing: `output.pcap` writes into a run's directory).
pub fn run(
    p: Prepared,
    opts: RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> (sim::Sim, output::Summary) {
    let plan = parallel::plan(&p.model, opts.partitions);
    run_sim(p, plan, None, None, opts, progress)
}

/// Runs a prepared scenario and writes its result files into `dir`. Queue samples of a run
/// in one partition are streamed to disk during the run, so memory does not grow with the
/// simulated time.
pub fn run_into(
    mut p: Prepared,
    dir: &Path,
    opts: RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> std::io::Result<output::Summary> {
    std::fs::create_dir_all(dir)?;
    let plan = parallel::plan(&p.model, opts.partitions);
    let stream = match plan {
        Ok(_) => None,
        Err(_) => Some(output::QueueStream::create(&dir.join(".queues.csv.tmp"))?),
    };
    let capture = output::Capture::create(dir, &mut p.model)?;
    let (mut sim, summary) = run_sim(p, plan, stream, capture, opts, progress);
    let end = sim.m.duration;
    sim.rec.capture.take().map(|c| c.finish(end)).transpose()?;
    output::write(dir, &sim.m, &mut sim.rec, &summary)?;
    Ok(summary)
}

/// Runs `p` as `plan` splits it (or as one partition, `plan` saying why).
fn run_sim(
    p: Prepared,
    plan: Result<parallel::Partitioning, String>,
    queue_out: Option<output::QueueStream>,
    capture: Option<output::Capture>,
    opts: RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> (sim::Sim, output::Summary) {
    let t0 = std::time::Instant::now();
    let (s, cost) = match &plan {
        Ok(parts) => {
            let copies = parallel::build_copies(&p.loaded, p.seed, parts.count - 1, opts.threads);
            let models = std::iter::once(p.model).chain(copies).collect();
            let (s, cost) = parallel::run(models, parts, opts.threads, progress);
            (s, Some(cost))
        }
        Err(_) => {
            let mut s = sim::Sim::new(p.model);
            s.rec.queue_out = queue_out;
            s.rec.capture = capture;
            s.run(progress);
            (s, None)
        }
    };
    let mut summary = output::summarize(
        &s.m,
        &s.rec,
        &p.file,
        &p.mechanism,
        &p.mechanism_keys,
        t0.elapsed().as_secs_f64(),
    );
    let windows = plan.is_ok().then_some(s.rec.windows);
    summary.partitions = output::PartitionSummary {
        count: plan.as_ref().map_or(1, |parts| parts.count),
        lookahead_s: plan.as_ref().ok().map(|parts| parts.lookahead as f64 / 1e9),
        one_because: plan.err(),
        windows,
        events_per_window: windows.map(|w| s.rec.events as f64 / w.max(1) as f64),
        critical_events: cost.as_ref().map(|c| {
            c.cores
                .iter()
                .zip(c.critical_events.iter().zip(&c.critical_mail))
                .map(|(&cores, (&events, &mail))| output::CriticalPath {
                    cores,
                    events,
                    mail,
                })
                .collect()
        }),
        barrier_wall_seconds: cost.map(|c| c.barrier_wait_s),
    };
    (s, summary)
}
