//! Soak under load (loopback only, bounded, self-stopping): one API, 3 supervised runs (their tasks
//! hang, so the runs stay live), 1,000 SSE clients spread over the runs' tasks, and 100 POST/s of
//! steer / pause / resume / kill for 60 s (`HARNESS_SOAK_SECS` to change). Reports requests served,
//! non-4xx errors, POST latency p50/p99, the API's RSS at start and end, and its CPU time.
//!
//! Run: `cargo bench --bench load`. Figures printed; nothing asserted.

mod support;
use std::time::{Duration, Instant};
use support::status_kb;

fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = &stat[stat.rfind(')').map(|i| i + 2).unwrap_or(0)..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat (11 and 12 after the comm).
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let secs: u64 = std::env::var("HARNESS_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    let mut sups = Vec::new();
    let mut runs: Vec<(String, Vec<String>)> = Vec::new();
    for r in 0..3 {
        let (id, _, guard) = support::hanging_run(d.path(), &home, &format!("soak{r}"), 4);
        sups.push(guard);
        runs.push((id, (0..4).map(|t| format!("T{t}")).collect()));
    }
    let api = support::ApiProc::start(&home, &[]);
    let (port, pid) = (api.port, api.proc.child.id());
    let rss_idle = status_kb(pid, "VmRSS:");
    let cpu_start = cpu_secs(pid);
    // RSS once a second: flat after the clients are connected means no growth with events served.
    let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let s2 = samples.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let v = status_kb(pid, "VmRSS:");
            if v == 0 {
                return;
            }
            s2.lock().unwrap().push(v);
        }
    });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (served, errors, mut lat, sse_ok, sse_events) = rt.block_on(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let stop = Instant::now() + Duration::from_secs(secs);
        // 1,000 SSE clients spread over the 12 tasks.
        let mut clients = tokio::task::JoinSet::new();
        for c in 0..1000 {
            let (run, tasks) = runs[c % runs.len()].clone();
            let task = tasks[(c / runs.len()) % tasks.len()].clone();
            clients.spawn(async move {
                let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return (false, 0u64) };
                let req = format!("GET /runs/{run}/tasks/{task}/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
                if s.write_all(req.as_bytes()).await.is_err() {
                    return (false, 0);
                }
                let mut buf = vec![0u8; 16 * 1024];
                let mut events = 0u64;
                let mut ok = false;
                while Instant::now() < stop {
                    match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => return (ok, events),
                        Ok(Ok(n)) => {
                            ok |= buf[..n].starts_with(b"HTTP/1.1 200");
                            events += memchr::memmem::find_iter(&buf[..n], b"\nid: ").count() as u64;
                        }
                        Err(_) => {}
                    }
                }
                (ok, events)
            });
        }
        // 100 POST/s of verbs.
        let mut served = 0u64;
        let mut errors = 0u64;
        let mut lat = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut i = 0usize;
        while Instant::now() < stop {
            tick.tick().await;
            let (run, tasks) = &runs[i % runs.len()];
            let task = &tasks[(i / 3) % tasks.len()];
            let (path, body) = match i % 4 {
                0 => (format!("/runs/{run}/tasks/{task}/steer"), r#"{"msg":"soak steer"}"#.to_string()),
                1 => (format!("/runs/{run}/pause"), "{}".to_string()),
                2 => (format!("/runs/{run}/resume"), "{}".to_string()),
                _ => (format!("/runs/{run}/tasks/{task}/kill"), "{}".to_string()),
            };
            i += 1;
            let t = Instant::now();
            let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                errors += 1;
                continue;
            };
            let req = format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(req.as_bytes()).await;
            let mut resp = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut resp)).await;
            lat.push(t.elapsed());
            served += 1;
            let code: u16 = String::from_utf8_lossy(&resp).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
            if !(200..500).contains(&code) {
                errors += 1;
            }
        }
        let mut sse_ok = 0;
        let mut sse_events = 0;
        while let Some(r) = clients.join_next().await {
            if let Ok((ok, n)) = r {
                sse_ok += ok as u32;
                sse_events += n;
            }
        }
        (served, errors, lat, sse_ok, sse_events)
    });
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e3;
    let rss = samples.lock().unwrap().clone();
    let after_connect = rss.get(3).copied().unwrap_or(0);
    let end = rss.last().copied().unwrap_or(0);
    let hwm = status_kb(pid, "VmHWM:");
    println!(
        "soak {secs} s: 3 runs, 1000 SSE clients ({sse_ok} answered 200, {sse_events} events received), {served} POSTs served \
         ({:.0}/s), non-4xx errors {errors} [goal 0], POST latency p50 {:.1} ms p99 {:.1} ms, API RSS idle {:.1} MB, \
         3 s in (clients connected) {:.1} MB, at the end {:.1} MB [goal: flat], peak {:.1} MB, API CPU {:.1} s ({:.0}% of one core)",
        served as f64 / secs as f64,
        p(0.5),
        p(0.99),
        rss_idle as f64 / 1024.0,
        after_connect as f64 / 1024.0,
        end as f64 / 1024.0,
        hwm as f64 / 1024.0,
        cpu_secs(pid) - cpu_start,
        (cpu_secs(pid) - cpu_start) / secs as f64 * 100.0
    );
}
