//! Python bindings: the module `tacc._core`. Only this crate knows about Python; scenario
//! errors become `tacc._core.ScenarioError` (a ValueError) whose message has one line per
//! error.

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;

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

/// `progress(now_ns, end_ns)`, when given, is called from the engine's progress hook (every
/// 2^20 events and at the end) with the GIL held again; the bar is Python's to draw. The first
/// exception it raises ends the calls and is raised once the run is over (the engine cannot be
/// stopped midway).
#[pyfunction]
#[pyo3(signature = (path, *, seed=None, sets=Vec::new(), out, progress=None))]
fn run(
    py: Python<'_>,
    path: &str,
    seed: Option<u64>,
    sets: Vec<(String, String)>,
    out: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let prepared = prepare(path, seed, &sets)?;
    let out_dir = out.to_string();
    py.detach(move || {
        let mut failed: Option<PyErr> = None;
        let result = tacc_sim::run_into(prepared, Path::new(&out_dir), &mut |now, end| {
            if let (Some(callback), None) = (&progress, &failed) {
                failed = Python::attach(|py| callback.call1(py, (now, end)).err());
            }
        });
        result
            .map_err(|e| PyOSError::new_err(format!("cannot write results to {out_dir}: {e}")))?;
        match failed {
            Some(e) => Err(e),
            None => Ok(out_dir),
        }
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

/// The built world as JSON (`tacc_mech::plan::Plan`), for the testbed and its agents.
#[pyfunction]
#[pyo3(signature = (path, *, seed=None, sets=Vec::new()))]
fn plan(path: &str, seed: Option<u64>, sets: Vec<(String, String)>) -> PyResult<String> {
    let p = prepare(path, seed, &sets)?;
    serde_json::to_string(&tacc_sim::plan::plan(&p)).map_err(scenario_err)
}

/// Runs a testbed agent ("host" or "switch") until the process is killed.
#[pyfunction]
fn agent_run(py: Python<'_>, role: &str, config: &str) -> PyResult<()> {
    let (role, config) = (role.to_string(), config.to_string());
    py.detach(move || tacc_agent::run(&role, &config))
        .map_err(PyOSError::new_err)
}

/// True if this build carries the testbed's eBPF programs.
#[pyfunction]
fn agent_available() -> bool {
    tacc_agent::has_programs()
}

/// The BPF DCTCP object file (empty if this build has none).
#[pyfunction]
fn dctcp_object(py: Python<'_>) -> Bound<'_, pyo3::types::PyBytes> {
    pyo3::types::PyBytes::new(py, tacc_agent::dctcp_object())
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
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(agent_run, m)?)?;
    m.add_function(wrap_pyfunction!(agent_available, m)?)?;
    m.add_function(wrap_pyfunction!(dctcp_object, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
