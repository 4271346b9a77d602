//! Benchmark of the live channel, with the real Claude Code CLI offline against the model stand-in
//! (which records when each model request arrives), in one session (`plan.session`: one claude
//! process for every turn):
//! 1. **steer → model request**: each turn runs a Bash tool `sleep 1.5; touch bench-end-K`; 300 ms
//!    into the tool a steer is posted (`POST …/steer`, answered `delivery: live`); the tool's end is
//!    when `bench-end-K` appears (polled every 0.2 ms). Per turn: the arrival of the model request
//!    that carries the steer, minus the tool's end (goal ≤ 50 ms) and minus the steer's answer.
//!    Turns without a steer alternate with them: claude's own gap from a tool's end to its next
//!    request is the baseline the steer's figure is a ratio of.
//! 2. **approval visible**: a second session whose task asks (`approvals: "ask"`, only `Read`
//!    unasked); each turn runs `touch approved-K`, which claude asks for over the live channel. Per
//!    turn: when `GET /runs/:id/approvals?state=pending` first lists it, minus when claude's
//!    `can_use_tool` line appeared in the task's log (both polled by this process, the log every
//!    0.2 ms, the API back to back) (goal p50 ≤ 20 ms); then it is allowed and the turn ends.
//!
//! The journal is fsynced as in production. Loopback only. Run: `cargo bench --bench live`; it says
//! SKIPPED without the pinned CLI (`bash .ci/run` installs it). Figures printed; no timing is asserted
//! (only that each steer is in the request after its tool and each allowed tool ran).

use serde_json::{Value, json};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod support;
use support::common::real::RealEnv;
use support::common::standin::StandIn;
use support::common::{ApiProc, Bench, Proc, control, http, wait_for};

const T: Duration = Duration::from_secs(90);
const TURNS: usize = 12;

fn main() {
    steer_to_request();
    approval_visible();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50 and max of signed millisecond figures.
fn summary(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    let p50 = v[(v.len() - 1) / 2];
    format!("p50 {p50:.1} ms, min {:.1} ms, max {:.1} ms (n = {})", v[0], v[v.len() - 1], v.len())
}

/// A session run of the real claude: the bench, its stand-in and environment, the supervisor, the
/// API.
struct Session {
    b: Bench,
    s: StandIn,
    api: ApiProc,
    sup: Proc,
    run: String,
}

impl Session {
    fn start(slug: &str, task_extra: Value) -> Option<Session> {
        let b = Bench::new();
        let s = StandIn::start();
        let env = RealEnv::new(b.dir.path(), &s)?;
        let mut task = json!({"id":"S","wave":1,"adapter":"claude","live":true,"prompt":"(a bench session)"});
        task.as_object_mut().unwrap().extend(task_extra.as_object().unwrap().clone());
        let plan = json!({"v":"plan/v1","slug":slug,"isolation":"shared","max_parallel":1,
            "session":{"idle_s":600,"prompt":false},"tasks":[task]});
        let mut vars = env.vars();
        // As in production: every journal append is fsynced before it is acted on.
        vars.push(("HARNESS_JOURNAL_FSYNC", "1".into()));
        let sup = b.start_supervised_with(&plan.to_string(), "success", &[], &vars);
        let api = ApiProc::start(&b.home(), &[]);
        let run = b.run_id();
        Some(Session { b, s, api, sup, run })
    }

    fn log_path(&self, slug: &str) -> PathBuf {
        self.b.repo().join(format!("runstate/{slug}.logs/S.log"))
    }

    fn post(&self, path: &str, body: &Value) -> Value {
        let r = http(
            self.api.port,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        );
        assert_eq!(r.status, 200, "POST {path}: {}", r.text());
        r.json()
    }

    /// Sends `msg` into the session (the next turn's message, or into the running turn).
    fn steer(&self, msg: &str) -> Value {
        let a = self.post(&format!("/runs/{}/tasks/S/steer", self.run), &json!({"msg": msg}));
        assert_eq!(a["delivery"], "live", "{a}");
        a
    }

    fn results(&self, slug: &str) -> usize {
        read_lines(&self.log_path(slug)).iter().filter(|l| l["type"] == "result").count()
    }

    fn end(mut self) {
        let a = control(&self.b.sock(), &json!({"verb":"end","by":"bench"}));
        assert_eq!(a["ok"], true, "{a}");
        let code = self.sup.wait_exit(T);
        assert_eq!(code, 0, "{}", self.b.supervisor_log());
    }
}

fn read_lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn steer_to_request() {
    let Some(s) = Session::start("steerbench", json!({})) else { return };
    let (mut after_end, mut after_ack, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    let mut steers = 0;
    // Turns alternate: with a steer during the tool, and without one (claude's own gap from a tool's
    // end to its next request: the baseline).
    for k in 0..2 * TURNS {
        let with_steer = k % 2 == 0;
        let done = s.results("steerbench");
        let tool = format!("bench-end-{k}");
        s.steer(&format!("Turn {k}. [anthropic:run:sleep 1.5; touch {tool}]"));
        steers += 1;
        wait_for(T, || {
            read_lines(&s.log_path("steerbench"))
                .iter()
                .any(|l| l["type"] == "assistant" && l["message"]["content"].to_string().contains(&tool))
                .then_some(())
        })
        .expect("the turn's tool call");
        std::thread::sleep(Duration::from_millis(300));
        let marker = format!("mid-turn-{k}");
        let mut acked = None;
        if with_steer {
            s.steer(&format!("Also note {marker}."));
            acked = Some(Instant::now());
            steers += 1;
        }
        let end_file = s.b.repo().join(&tool);
        let ended = wait_for(Duration::from_secs(30), || {
            if end_file.exists() {
                return Some(Instant::now());
            }
            std::thread::sleep(Duration::from_micros(200));
            None
        })
        .expect("the tool's end");
        // The request after the tool: the first of this turn whose last message holds a tool result.
        let req = wait_for(T, || {
            s.s.requests_to("/v1/messages").into_iter().find(|q| {
                let last = q.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
                q.body["messages"].to_string().contains(&tool) && last.to_string().contains("\"tool_result\"")
            })
        })
        .expect("the model request after the tool");
        let lag = ms(req.at.saturating_duration_since(ended)) - ms(ended.saturating_duration_since(req.at));
        if let Some(acked) = acked {
            assert!(req.body["messages"].to_string().contains(&marker), "the steer is in the request after the tool");
            after_end.push(lag);
            after_ack.push(ms(req.at.saturating_duration_since(acked)));
        } else {
            baseline.push(lag);
        }
        wait_for(T, || (s.results("steerbench") > done).then_some(())).expect("the turn's end");
        // The next message waits until this turn's steers are taken (their receipts journaled).
        wait_for(T, || {
            (s.b.controls("steer").iter().filter(|c| c["outcome"] == "taken").count() >= steers).then_some(())
        })
        .expect("the turn's steers taken");
    }
    let results = s.results("steerbench");
    s.end();
    let (p50, base) = (median(&after_end), median(&baseline));
    println!(
        "steer into a running tool -> the model request carrying it ({} turns in one claude process, {results} results):\n  \
         after the tool's end, with a steer: {} [goal <= 50 ms]\n  \
         after the tool's end, no steer (claude's own gap, the baseline): {}\n  \
         ratio of the p50s: {:.2}x the baseline; {:.2}x the 50 ms goal\n  \
         after the steer's answer (the tool ran ~1.2 s more): {}",
        2 * TURNS,
        summary(&mut after_end),
        summary(&mut baseline),
        p50 / base,
        p50 / 50.0,
        summary(&mut after_ack)
    );
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

fn approval_visible() {
    let Some(s) = Session::start("askbench", json!({"approvals":"ask","allowed_tools":"Read"})) else { return };
    let log = s.log_path("askbench");
    let mut lag = Vec::new();
    for k in 0..TURNS {
        let done = s.results("askbench");
        let file = format!("approved-{k}");
        // The log watcher: from the log's current end, the first can_use_tool line naming the file.
        let start = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (log, file, stop) = (log.clone(), file.clone(), stop.clone());
            std::thread::spawn(move || watch_log(&log, start, &file, &stop))
        };
        s.steer(&format!("Turn {k}. [anthropic:run:touch {file}]"));
        let (id, visible) = wait_for(T, || {
            let r = s.api.get(&format!("/runs/{}/approvals?state=pending", s.run));
            let now = Instant::now();
            r.json()["approvals"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["input"].to_string().contains(&file))
                .map(|a| (a["id"].as_str().unwrap().to_string(), now))
        })
        .expect("the pending approval");
        stop.store(true, Ordering::SeqCst);
        let seen = watcher.join().unwrap().expect("claude's can_use_tool line in the log");
        lag.push(ms(visible.saturating_duration_since(seen)) - ms(seen.saturating_duration_since(visible)));
        s.post(&format!("/runs/{}/tasks/S/approvals/{id}", s.run), &json!({"decision":"allow"}));
        wait_for(T, || (s.results("askbench") > done).then_some(())).expect("the turn's end");
        assert!(s.b.repo().join(&file).exists(), "the allowed tool ran");
    }
    s.end();
    let p50 = median(&lag);
    println!(
        "approval: claude's can_use_tool line in the log -> listed by GET /runs/:id/approvals?state=pending:\n  {} [goal p50 <= 20 ms]: {:.2}x the goal",
        summary(&mut lag),
        p50 / 20.0
    );
}

/// Polls `log` from byte `start` every 0.2 ms until a `can_use_tool` line naming `file` is complete:
/// when it was first seen. Gives up when `stop` is set and one more read finds nothing.
fn watch_log(log: &Path, start: u64, file: &str, stop: &AtomicBool) -> Option<Instant> {
    let mut buf = Vec::new();
    let mut pos = start;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        if let Ok(mut f) = std::fs::File::open(log)
            && f.seek(SeekFrom::Start(pos)).is_ok()
        {
            let mut more = Vec::new();
            if let Ok(n) = f.read_to_end(&mut more) {
                pos += n as u64;
                buf.extend_from_slice(&more);
            }
        }
        let now = Instant::now();
        // Complete lines only; the last, possibly partial, one stays for the next read.
        if let Some(nl) = buf.iter().rposition(|b| *b == b'\n') {
            let found = buf[..nl].split(|b| *b == b'\n').any(|line| {
                let text = String::from_utf8_lossy(line);
                text.contains("\"can_use_tool\"") && text.contains(file)
            });
            if found {
                return Some(now);
            }
            buf.drain(..=nl);
        }
        if stopping {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
