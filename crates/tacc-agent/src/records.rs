//! The files an agent writes as it runs (a testbed agent's CSV of samples and counts, the
//! daemon's status), written by a thread of their own. A write can wait on the file system:
//! every agent of a testbed run once stopped for the same 640 ms, their control loops with
//! them, while the machine's CPUs stayed 62% idle or more (HyGenICC's rates then fell to R_min
//! after the new connections had come and gone). The loops hand their lines over and go on.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::host::write_json_text;

enum Job {
    /// Lines for the CSV.
    Append(String),
    /// A file's whole new text.
    Replace(PathBuf, String),
}

/// The writing thread of one agent's files: a CSV it appends to (if any), and files it
/// replaces whole.
pub(crate) struct Records {
    jobs: Option<Sender<Job>>,
    /// The first write that failed; the agent stops on it at its next hand-over.
    failed: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Records {
    /// Creates `csv` with its `header` line (here, so that a path that cannot be written is
    /// an error at the agent's start) and starts the thread.
    pub(crate) fn create(csv: &Path, header: &str) -> Result<Records, String> {
        let mut out = BufWriter::new(
            File::create(csv).map_err(|e| format!("cannot write {}: {e}", csv.display()))?,
        );
        writeln!(out, "{header}")
            .and_then(|_| out.flush())
            .map_err(|e| format!("cannot write {}: {e}", csv.display()))?;
        Ok(Records::start(Some(out)))
    }

    /// The thread for files replaced whole alone.
    pub(crate) fn without_csv() -> Records {
        Records::start(None)
    }

    fn start(mut out: Option<BufWriter<File>>) -> Records {
        let (jobs, todo) = channel();
        let failed = Arc::new(Mutex::new(None));
        let failure = Arc::clone(&failed);
        let thread = std::thread::spawn(move || {
            if let Err(e) = write_all(&todo, &mut out) {
                *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        });
        Records {
            jobs: Some(jobs),
            failed,
            thread: Some(thread),
        }
    }

    /// Appends `lines` (each ending in a newline) to the CSV; an error where there is none.
    pub(crate) fn append(&self, lines: String) -> Result<(), String> {
        self.send(Job::Append(lines))
    }

    /// Replaces `path` whole with `text` (a reader never sees half of it).
    pub(crate) fn replace(&self, path: &Path, text: String) -> Result<(), String> {
        self.send(Job::Replace(path.to_path_buf(), text))
    }

    /// Replaces `path` whole with `value` as JSON.
    pub(crate) fn replace_json(
        &self,
        path: &Path,
        value: &impl serde::Serialize,
    ) -> Result<(), String> {
        self.replace(
            path,
            serde_json::to_string(value).map_err(|e| e.to_string())?,
        )
    }

    fn send(&self, job: Job) -> Result<(), String> {
        if let Some(e) = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(e);
        }
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| "the records' writer has stopped".to_string())
    }
}

impl Drop for Records {
    /// What was handed over is written before the agent goes.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes the jobs as they come, the CSV flushed whenever none is waiting.
fn write_all(todo: &Receiver<Job>, out: &mut Option<BufWriter<File>>) -> Result<(), String> {
    while let Ok(mut job) = todo.recv() {
        loop {
            match (job, out.as_mut()) {
                (Job::Append(lines), Some(out)) => {
                    out.write_all(lines.as_bytes()).map_err(|e| e.to_string())?
                }
                (Job::Append(_), None) => return Err("lines for a CSV the agent has not".into()),
                (Job::Replace(path, text), _) => write_json_text(&path, &text)?,
            }
            match todo.try_recv() {
                Ok(next) => job = next,
                Err(_) => break,
            }
        }
        if let Some(out) = out {
            out.flush().map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_handed_over_is_written_in_order_by_the_time_the_records_go() {
        let dir = std::env::temp_dir().join(format!("tacc-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (csv, json) = (dir.join("rates.csv"), dir.join("counts.json"));
        {
            let records = Records::create(&csv, "time_s,rate").unwrap();
            for i in 0..1000 {
                records.append(format!("{i},{}\n", i * 2)).unwrap();
            }
            records.replace(&json, "{\"a\":1}".into()).unwrap();
            records.replace(&json, "{\"a\":2}".into()).unwrap();
        }
        let text = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1001);
        assert_eq!(lines[0], "time_s,rate");
        assert_eq!(lines[1000], "999,1998");
        assert_eq!(std::fs::read_to_string(&json).unwrap(), "{\"a\":2}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_csv_files_are_replaced_and_lines_refused() {
        let dir = std::env::temp_dir().join(format!("tacc-records-none-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let status = dir.join("status.json");
        {
            let records = Records::without_csv();
            records.replace(&status, "{\"up\":1}".into()).unwrap();
            records.append("1\n".into()).unwrap(); // refused by the thread, reported later
        }
        assert_eq!(std::fs::read_to_string(&status).unwrap(), "{\"up\":1}");
        let records = Records::without_csv();
        records.append("1\n".into()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while records.replace(&status, "{}".into()).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "lines without a CSV accepted"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(records);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_write_that_failed_stops_the_agent_at_its_next_hand_over() {
        let dir = std::env::temp_dir().join(format!("tacc-records-fail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let records = Records::create(&dir.join("rates.csv"), "time_s").unwrap();
        records
            .replace(&dir.join("missing").join("counts.json"), "{}".into())
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let err = loop {
            match records.append("1\n".into()) {
                Err(e) => break e,
                Ok(()) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Ok(()) => panic!("the failed write was never reported"),
            }
        };
        assert!(err.contains("missing"), "{err}");
        drop(records);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
