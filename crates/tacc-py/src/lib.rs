//! Python bindings: the module `tacc._core`. Only this crate knows about Python; scenario
//! errors become `tacc._core.ScenarioError` (a ValueError) whose message has one line per
//! error.

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

create_exception!(
    _core,
    ScenarioError,
    PyValueError,
    "A scenario file or override is invalid."
);

fn scenario_err(e: impl std::fmt::Display) -> PyErr {
    ScenarioError::new_err(e.to_string())
}

fn prepare(
    path: &str,
    seed: Option<u64>,
    sets: &[(String, String)],
) -> PyResult<tacc_sim::Prepared> {
    let text = tacc_sim::read_scenario(Path::new(path)).map_err(scenario_err)?;
    tacc_sim::load(&text, path, sets, seed).map_err(scenario_err)
}

/// A progress bar on stderr, drawn only for runs that take more than two seconds.
struct Progress {
    enabled: bool,
    started: Instant,
    drawn: bool,
}

impl Progress {
    fn update(&mut self, now: u64, end: u64) {
        if !self.enabled || self.started.elapsed().as_secs_f64() < 2.0 {
            return;
        }
        let frac = if end == 0 {
            1.0
        } else {
            now as f64 / end as f64
        };
        let wall = self.started.elapsed().as_secs_f64();
        let left = if frac > 0.0 {
            wall * (1.0 - frac) / frac
        } else {
            0.0
        };
        let width = 30;
        let filled = (frac * width as f64) as usize;
        eprint!(
            "\r[{}{}] {:5.1}%  sim {:.2}/{:.2} s  ~{:.0} s left ",
            "#".repeat(filled),
            ".".repeat(width - filled),
            frac * 100.0,
            now as f64 / 1e9,
            end as f64 / 1e9,
            left
        );
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }
    fn finish(&self) {
        if self.drawn {
            eprintln!();
        }
    }
}

#[pyfunction]
#[pyo3(signature = (path, *, seed=None, sets=Vec::new(), out, progress=false))]
fn run(
    py: Python<'_>,
    path: &str,
    seed: Option<u64>,
    sets: Vec<(String, String)>,
    out: &str,
    progress: bool,
) -> PyResult<String> {
    let prepared = prepare(path, seed, &sets)?;
    let out_dir = out.to_string();
    let enabled = progress && std::io::stderr().is_terminal();
    py.detach(move || {
        let mut bar = Progress {
            enabled,
            started: Instant::now(),
            drawn: false,
        };
        let result = tacc_sim::run_into(prepared, Path::new(&out_dir), &mut |now, end| {
            bar.update(now, end)
        });
        bar.finish();
        result
            .map_err(|e| PyOSError::new_err(format!("cannot write results to {out_dir}: {e}")))?;
        Ok(out_dir)
    })
}

#[pyfunction]
#[pyo3(signature = (path, *, sets=Vec::new()))]
fn validate<'py>(
    py: Python<'py>,
    path: &str,
    sets: Vec<(String, String)>,
) -> PyResult<Bound<'py, PyDict>> {
    let p = prepare(path, None, &sets)?;
    let m = &p.model;
    let d = PyDict::new(py);
    d.set_item("name", &m.name)?;
    d.set_item("duration_s", m.duration as f64 / 1e9)?;
    d.set_item("hosts", m.hosts.len())?;
    d.set_item("switches", m.graph.switches.len())?;
    d.set_item("links", m.graph.links.len())?;
    d.set_item("flows", m.flows.len())?;
    Ok(d)
}

#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
