//! Benchmark: `GET /runs` over 10,000 registered runs whose journals hold 50 records each (median
//! latency with the API's cache cold — a fresh API process — and warm), and journal replay throughput.
//!
//! Run: `cargo bench --bench durable` (figures printed; nothing asserted).

use harness::home::Home;
use harness::journal::{Record, RunEvent, TaskState};
use harness::registry;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

mod support;

const RUNS: usize = 10_000;
const RECORDS: usize = 50;

/// started + 12 tasks x (leased, implemented, gated, committed) + finished = 50 records.
fn journal_text() -> String {
    let mut s = String::new();
    let mut push = |r: Record| {
        s.push_str(&serde_json::to_string(&r).unwrap());
        s.push('\n');
    };
    push(Record::run(RunEvent::Started, "bench", None));
    for t in 0..12 {
        let id = harness::ids::TaskId::parse(&format!("T{t}")).unwrap();
        for st in [TaskState::Leased, TaskState::Implemented, TaskState::Gated, TaskState::Committed] {
            let mut r = Record::task(&id, st);
            if st == TaskState::Committed {
                r.sha = Some("0123456789abcdef0123456789abcdef01234567".into());
            }
            r.session_id = Some("6c1e2b4a-8d9f-4e3c-b2a1-7f6e5d4c3b2a".into());
            push(r.into());
        }
    }
    push(Record::run(RunEvent::Finished, "bench", None));
    s
}

fn get(port: u16) -> (Duration, usize) {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET /runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    (t.elapsed(), buf.len())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("home"));
    home.ensure().unwrap();
    let journal = journal_text();
    assert_eq!(journal.lines().count(), RECORDS);
    let plan = serde_json::json!({"v":"plan/v1","slug":"bench","tasks":
        (0..12).map(|i| serde_json::json!({"id":format!("T{i}"),"wave":1 + i / 4,"adapter":"claude","prompt":"p"})).collect::<Vec<_>>()});
    let plan = serde_json::to_vec(&plan).unwrap();
    let t = Instant::now();
    for i in 0..RUNS {
        let repo = dir.path().join(format!("repos/r{i}"));
        let p = support::bench_pointer(&repo, "bench", &format!("r{i}"));
        std::fs::write(p.runstate_dir.join("bench.jsonl"), &journal).unwrap();
        std::fs::write(p.runstate_dir.join("bench.plan.json"), &plan).unwrap();
        registry::write(&home, &p).unwrap();
    }
    println!("setup: {RUNS} runs x {RECORDS} records in {:.1}s", t.elapsed().as_secs_f64());

    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut body_len = 0;
    for round in 0..5 {
        let api = support::ApiProc::start(&home.root, &[]);
        let port = api.port;
        let (d, n) = get(port);
        cold.push(d);
        body_len = n;
        for _ in 0..if round == 0 { 20 } else { 4 } {
            warm.push(get(port).0);
        }
        drop(api);
    }
    println!(
        "GET /runs ({RUNS} runs, {:.1} MB response): cold median {:.1} ms (n={}), warm median {:.1} ms (n={}) [goal warm <= 50 ms]",
        body_len as f64 / 1e6,
        median(cold.clone()).as_secs_f64() * 1e3,
        cold.len(),
        median(warm.clone()).as_secs_f64() * 1e3,
        warm.len()
    );

    // Replay throughput: one journal of 1,000,000 records folded from bytes in memory.
    let mut big = String::new();
    let chunk = journal_text();
    let lines: Vec<&str> = chunk.lines().skip(1).take(48).collect();
    big.push_str(chunk.lines().next().unwrap());
    big.push('\n');
    let mut n = 1usize;
    'fill: for rep in 0.. {
        for l in &lines {
            // Distinct task ids per repetition keep the state machine valid.
            big.push_str(&l.replace("\"T", &format!("\"R{rep}T")));
            big.push('\n');
            n += 1;
            if n == 1_000_000 {
                break 'fill;
            }
        }
    }
    let bytes = big.into_bytes();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let v = harness::journal::replay_bytes(&bytes);
        let s = t.elapsed().as_secs_f64();
        assert_eq!(v.records as usize, n);
        best = best.min(s);
    }
    println!(
        "journal replay: {n} records ({:.0} MB) in {:.3} s = {:.0} records/s",
        bytes.len() as f64 / 1e6,
        best,
        n as f64 / best
    );
}
