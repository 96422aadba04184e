//! The agent's Prometheus endpoint: `GET /metrics` answers the text exposition format
//! (version 0.0.4) of the agent's last snapshot, which the agent's loop renews every second.
//! A thread of its own serves it, so a slow client never holds up the shim.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The text the endpoint serves, shared with the agent's loop.
#[derive(Clone, Default)]
pub struct Exposition(Arc<Mutex<String>>);

impl Exposition {
    pub fn set(&self, text: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Binds `addr` and serves `text` from a thread until the process ends.
pub fn serve(addr: SocketAddr, text: Exposition) -> Result<(), String> {
    let listener =
        TcpListener::bind(addr).map_err(|e| format!("metrics: cannot listen on {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = answer(stream, &text);
            }
        })
        .map_err(|e| format!("metrics: {e}"))?;
    Ok(())
}

/// One request, one answer, then the connection closes.
fn answer(mut stream: TcpStream, text: &Exposition) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
        match stream.read(&mut buf)? {
            0 => break,
            n => request.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&request);
    let target = line.split_whitespace().take(2).collect::<Vec<_>>();
    let (status, body) = match target.as_slice() {
        ["GET", "/metrics"] => ("200 OK", text.get()),
        ["GET", _] => ("404 Not Found", "only /metrics is served\n".to_string()),
        _ => ("405 Method Not Allowed", "GET /metrics\n".to_string()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Builds an exposition: each metric's HELP and TYPE once, then its samples.
#[derive(Default)]
pub struct Text {
    out: String,
    declared: Vec<String>,
}

impl Text {
    /// A sample of `name` (prefixed `tacc_`) with `labels`; `kind` is "counter" or "gauge".
    pub fn sample(&mut self, name: &str, kind: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        let name = format!("tacc_{name}");
        if !self.declared.contains(&name) {
            let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            self.declared.push(name.clone());
        }
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.join(","))
        };
        let _ = writeln!(self.out, "{name}{labels} {v}");
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_metric_is_declared_once_and_labels_are_escaped() {
        let mut t = Text::default();
        t.sample("rate_bps", "gauge", "The rate.", &[("vm", "a\"b")], 5.0);
        t.sample("rate_bps", "gauge", "The rate.", &[("vm", "c")], 6.0);
        t.sample("uptime_seconds", "gauge", "Up.", &[], 1.5);
        assert_eq!(
            t.finish(),
            "# HELP tacc_rate_bps The rate.\n# TYPE tacc_rate_bps gauge\n\
             tacc_rate_bps{vm=\"a\\\"b\"} 5\ntacc_rate_bps{vm=\"c\"} 6\n\
             # HELP tacc_uptime_seconds Up.\n# TYPE tacc_uptime_seconds gauge\n\
             tacc_uptime_seconds 1.5\n"
        );
    }

    #[test]
    fn the_endpoint_serves_metrics_and_nothing_else() {
        let text = Exposition::default();
        text.set("tacc_x 1\n".into());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        serve(addr, text.clone()).unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            r
        };
        let ok = get("/metrics");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\ntacc_x 1\n"), "{ok}");
        text.set("tacc_x 2\n".into());
        assert!(get("/metrics").ends_with("tacc_x 2\n"));
        assert!(get("/").starts_with("HTTP/1.1 404"));
    }
}
