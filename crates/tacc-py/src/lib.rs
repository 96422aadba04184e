//! Python bindings: the module `tacc._core`. Only this crate knows about Python; scenario
//! errors become `tacc._core.ScenarioError` (a ValueError) whose message has one line per
//! error.

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;

mod agent_config;
mod fabric_config;

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
#[pyo3(signature = (path, *, seed=None, sets=Vec::new(), out, progress=None, threads=None, partitions=None))]
#[allow(clippy::too_many_arguments)] // the keyword arguments of tacc._core.run
fn run(
    py: Python<'_>,
    path: &str,
    seed: Option<u64>,
    sets: Vec<(String, String)>,
    out: &str,
    progress: Option<Py<PyAny>>,
    threads: Option<usize>,
    partitions: Option<usize>,
) -> PyResult<String> {
    let prepared = prepare(path, seed, &sets)?;
    let out_dir = out.to_string();
    let mut opts = tacc_sim::RunOptions::default();
    if let Some(n) = threads {
        opts.threads = n.max(1);
    }
    opts.partitions = partitions.map(|n| n.max(1));
    py.detach(move || {
        let mut failed: Option<PyErr> = None;
        let result = tacc_sim::run_into(prepared, Path::new(&out_dir), opts, &mut |now, end| {
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
    d.set_item("topology", m.graph.kind)?;
    Ok(d)
}

/// The scenario's open-loop flows with the ports each crosses, drawn without running it
/// (`tacc_sim::workload`).
#[pyfunction]
#[pyo3(signature = (path, *, seed=None, sets=Vec::new()))]
fn workload<'py>(
    py: Python<'py>,
    path: &str,
    seed: Option<u64>,
    sets: Vec<(String, String)>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let mut p = prepare(path, seed, &sets)?;
    tacc_sim::workload::generate(&mut p.model)
        .into_iter()
        .map(|f| {
            let d = PyDict::new(py);
            d.set_item("name", f.name)?;
            d.set_item("group", f.group)?;
            d.set_item("src_vm", f.src_vm)?;
            d.set_item("dst_vm", f.dst_vm)?;
            d.set_item("bytes", f.bytes)?;
            d.set_item("start_ns", f.start)?;
            d.set_item("cc", f.cc)?;
            d.set_item("ecn", f.ecn)?;
            d.set_item("src_port", f.src_port)?;
            d.set_item("dst_port", f.dst_port)?;
            d.set_item("ports", f.ports)?;
            Ok(d)
        })
        .collect()
}

/// The capture file of each port named, as the engine names them (`sw0->r0`:
/// `sw0-to-r0.pcapng`).
#[pyfunction]
fn capture_files(ports: Vec<String>) -> Vec<String> {
    tacc_sim::output::capture_files(&ports.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Rewrites tcpdump's classic pcap file `src` as a capture of port `port` in the format of
/// the engine's (`tacc_sim::output::Capture`): pcapng, the interface named after the port.
/// Returns the number of packets, and whether `src` ended inside a record (the packets
/// before it are kept).
#[pyfunction]
fn pcap_to_pcapng(src: &str, dst: &str, port: &str) -> PyResult<(usize, bool)> {
    use tacc_sim::pcap::{read_pcap, PcapngWriter};
    let bytes = std::fs::read(src).map_err(|e| PyOSError::new_err(format!("{src}: {e}")))?;
    let pcap = read_pcap(&bytes).map_err(|e| PyValueError::new_err(format!("{src}: {e}")))?;
    let write = || -> std::io::Result<()> {
        let file = std::io::BufWriter::new(std::fs::File::create(dst)?);
        let app = concat!("tacc testbed ", env!("CARGO_PKG_VERSION"), " (tcpdump)");
        let mut w = PcapngWriter::new(file, app)?;
        let snaplen = tacc_sim::output::PCAP_SNAPLEN;
        let interface = w.interface(port, pcap.linktype, snaplen)?;
        for (ts, len, data) in &pcap.packets {
            w.packet(interface, *ts, data, *len as usize, None)?;
        }
        w.flush()
    };
    write().map_err(|e| PyOSError::new_err(format!("{dst}: {e}")))?;
    Ok((pcap.packets.len(), pcap.cut_short))
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

/// `tacc agent --config`: reads and checks the host config `text` (named `file` in errors,
/// which are a ScenarioError of one line each), then, unless `check`, runs the agent until
/// SIGTERM, SIGINT or SIGHUP and takes down what it set up.
#[pyfunction]
#[pyo3(signature = (text, file, *, check=false))]
fn agent_daemon(py: Python<'_>, text: &str, file: &str, check: bool) -> PyResult<()> {
    let cfg = agent_config::read(text, file).map_err(scenario_err)?;
    if check {
        return Ok(());
    }
    if !tacc_agent::has_programs() {
        return Err(PyOSError::new_err(
            "tacc was built without its eBPF programs (clang was missing)",
        ));
    }
    py.detach(move || tacc_agent::daemon::run(cfg))
        .map_err(PyOSError::new_err)
}

/// `tacc controller --config`: reads and checks the fabric config `text` (named `file` in
/// errors, which are a ScenarioError of one line each); returns what the controller daemon
/// runs with as JSON: the fabric's plan, its listening addresses, the hosts' keys (hex;
/// `keys=False` leaves the key files unread but for the stats key of switch `switch`), the
/// switches' datapath ids, port numbers and stats sockets.
#[pyfunction]
#[pyo3(signature = (text, file, *, keys=true, switch=None))]
fn controller_config(text: &str, file: &str, keys: bool, switch: Option<&str>) -> PyResult<String> {
    let cfg = fabric_config::read(text, file, keys, switch).map_err(scenario_err)?;
    serde_json::to_string(&cfg).map_err(scenario_err)
}

/// The line of a key path such as `flows[2].src` in a scenario's TOML text, as the engine's
/// errors name it (`tacc_sim::scenario::locate`); None if it is not written there.
#[pyfunction]
fn locate(text: &str, path: &str) -> Option<usize> {
    tacc_sim::scenario::locate(text, path)
}

/// The documented scenario tables `name` picks (every table when `None`), each as a dict:
/// `table`, `tag` (`(key, value)` or None), `array`, `doc`, `keys` (dicts of `key`, `unit`,
/// `default`, `range`, `doc`).
#[pyfunction]
#[pyo3(signature = (name=None))]
fn keys<'py>(py: Python<'py>, name: Option<&str>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let tables = match name {
        Some(n) => tacc_sim::keys::lookup(n),
        None => tacc_sim::keys::tables(),
    };
    tables
        .into_iter()
        .map(|t| {
            let d = PyDict::new(py);
            d.set_item("table", t.table)?;
            d.set_item("tag", t.tag)?;
            d.set_item("array", t.array)?;
            d.set_item("doc", t.doc)?;
            let keys = t
                .keys
                .iter()
                .map(|k| {
                    let kd = PyDict::new(py);
                    kd.set_item("key", k.key)?;
                    kd.set_item("unit", k.unit)?;
                    kd.set_item("default", k.default)?;
                    kd.set_item("range", k.range)?;
                    kd.set_item("doc", k.doc)?;
                    Ok(kd)
                })
                .collect::<PyResult<Vec<_>>>()?;
            d.set_item("keys", keys)?;
            Ok(d)
        })
        .collect()
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

/// The controller side of a plan's mechanism (`tacc_mech::controller::Controller`) for the
/// testbed's OpenFlow app: every message in and out is the JSON of a `tacc_mech::control` type,
/// so the app translates OpenFlow and runs no mechanism logic of its own. (Behind a lock: an
/// app's green threads may run on more than one OS thread.)
#[pyclass(module = "tacc._core")]
struct Controller {
    inner: std::sync::Mutex<tacc_mech::controller::Controller>,
}

impl Controller {
    fn get(&self) -> std::sync::MutexGuard<'_, tacc_mech::controller::Controller> {
        // A panic in a call (a bug) reaches Python as an exception; the state stays usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn to_json<T: serde::Serialize>(items: &[T]) -> PyResult<Vec<String>> {
    items
        .iter()
        .map(|m| serde_json::to_string(m).map_err(|e| PyValueError::new_err(e.to_string())))
        .collect()
}

#[pymethods]
impl Controller {
    #[new]
    fn new(plan: &str) -> PyResult<Self> {
        let plan = serde_json::from_str(plan)
            .map_err(|e| PyValueError::new_err(format!("not a tacc plan: {e}")))?;
        Ok(Controller {
            inner: std::sync::Mutex::new(tacc_mech::controller::Controller::new(plan)),
        })
    }

    fn has_app(&self) -> bool {
        self.get().has_app()
    }

    fn has_hook(&self, switch: u32) -> bool {
        self.get().has_hook(switch)
    }

    /// `switch`'s initial rules; with `port_copies`, less the flags-only copy rules its ports'
    /// programs serve in the switch's place (the switch agent's reports).
    #[pyo3(signature = (switch, port_copies = false))]
    fn initial_rules(&self, switch: u32, port_copies: bool) -> PyResult<Vec<String>> {
        let ctl = self.get();
        let rules: Vec<_> = ctl
            .initial_rules()
            .iter()
            .filter(|r| r.switch == switch && !(port_copies && r.tcp_flags_copy().is_some()))
            .cloned()
            .collect();
        to_json(&rules)
    }

    #[getter]
    fn latency_ns(&self) -> u64 {
        self.get().latency()
    }

    #[pyo3(signature = (now_ns, switch, in_port, out_port, packet))]
    fn packet_in(
        &self,
        now_ns: u64,
        switch: u32,
        in_port: u32,
        out_port: Option<u32>,
        packet: Vec<u8>,
    ) -> PyResult<Vec<String>> {
        let out = self
            .get()
            .packet_in(now_ns, switch, in_port, out_port, packet)
            .map_err(|e| PyValueError::new_err(format!("not an IPv4 packet: {e:?}")))?;
        to_json(&out)
    }

    fn stats_reply(&self, now_ns: u64, reply: &str) -> PyResult<Vec<String>> {
        let reply = serde_json::from_str(reply)
            .map_err(|e| PyValueError::new_err(format!("not a stats reply: {e}")))?;
        to_json(&self.get().stats_reply(now_ns, &reply))
    }

    fn timer(&self, now_ns: u64) -> PyResult<Vec<String>> {
        to_json(&self.get().timer(now_ns))
    }

    fn poll_at(&self) -> Option<u64> {
        self.get().poll_at()
    }

    /// The plan port a switch sends this 5-tuple out of: among equal ports, the one the
    /// engine's ECMP hash picks (`Plan::route_port`).
    fn route_port(
        &self,
        switch: u32,
        src: u32,
        dst: u32,
        protocol: u8,
        sport: u16,
        dport: u16,
    ) -> Option<u32> {
        self.get()
            .plan()
            .route_port(switch, src, dst, protocol, sport, dport)
    }
}

#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Before any Python thread allocates (`tacc run` imports the plotting libraries on one
    // while the engine runs): an arena it left would hold a partition's world in 4 KiB pages
    // (k = 32 for 0.2 s on 2 threads waited 1.3-2.0 s a thread against 0.5-0.6 s).
    tacc_sim::heap::one_arena();
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("FIRST_PORT", tacc_sim::model::FIRST_PORT)?;
    m.add("TCP_DPORT", tacc_sim::model::TCP_DPORT)?;
    m.add("PCAP_SNAPLEN", tacc_sim::output::PCAP_SNAPLEN)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(workload, m)?)?;
    m.add_function(wrap_pyfunction!(pcap_to_pcapng, m)?)?;
    m.add_function(wrap_pyfunction!(capture_files, m)?)?;
    m.add_function(wrap_pyfunction!(locate, m)?)?;
    m.add_function(wrap_pyfunction!(keys, m)?)?;
    m.add_function(wrap_pyfunction!(agent_run, m)?)?;
    m.add_function(wrap_pyfunction!(agent_daemon, m)?)?;
    m.add_function(wrap_pyfunction!(controller_config, m)?)?;
    m.add_function(wrap_pyfunction!(agent_available, m)?)?;
    m.add_function(wrap_pyfunction!(dctcp_object, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_class::<Controller>()?;
    Ok(())
}
