//! The real Claude Code and Codex CLIs end to end, offline: through `wrappers/na.sh` and
//! `wrappers/codex.sh`, the supervisor and the API, against the local model stand-in
//! (tests/it/common/standin.rs). `.ci/run` installs the pinned CLIs and sets
//! `HARNESS_REQUIRE_REAL_ENGINES=1`, so a missing CLI fails there; elsewhere these tests say
//! `SKIPPED` on stderr and pass.
//!
//! Re-capture fresh fixtures from the real CLIs (README): `HARNESS_CAPTURE_DIR=<dir> cargo test --test
//! it real_engines::the_normalizer_maps_everything`.

use crate::common::real::RealEnv;
use crate::common::standin::StandIn;
use crate::common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// A scratch repo and home, the stand-in, and the real CLIs pointed at it.
struct Real {
    b: Bench,
    s: StandIn,
    env: RealEnv,
}

impl Real {
    fn new() -> Option<Real> {
        let b = Bench::new();
        let s = StandIn::start();
        let env = RealEnv::new(b.dir.path(), &s)?;
        Some(Real { b, s, env })
    }
    /// `harness run PLAN --supervised --foreground` with the real engines.
    fn start(&self, plan: &str) -> Proc {
        self.b.start_supervised_with(plan, "success", &[], &self.env.vars())
    }
    fn log(&self, slug: &str, name: &str) -> PathBuf {
        self.b.repo().join(format!("runstate/{slug}.logs/{name}"))
    }
    fn post(&self, api: &ApiProc, path: &str, body: &Value) -> Resp {
        http(api.port, "POST", path, &[("Content-Type", "application/json")], Some(body.to_string().as_bytes()))
    }
    fn task_records(&self, task: &str) -> Vec<Value> {
        self.b.journal().into_iter().filter(|r| r["kind"] == "task" && r["task"] == task).collect()
    }
}

/// Events of an SSE stream until (and with) the `exit` event.
fn until_exit(c: &mut SseConn) -> Vec<(Option<String>, Value)> {
    let mut out = Vec::new();
    loop {
        let e = c.next_event().unwrap_or_else(|| panic!("stream ended before its exit event: {out:#?}"));
        let v: Value = serde_json::from_str(&e.data).unwrap();
        let done = v["type"] == "exit";
        out.push((e.id, v));
        if done {
            return out;
        }
    }
}

/// A task's events from the durable endpoint (one page: these logs are short).
fn durable_events(api: &ApiProc, run: &str, task: &str) -> Vec<Value> {
    let r = api.get(&format!("/runs/{run}/tasks/{task}/events?limit=5000"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.header("harness-more"), Some("true"));
    r.text().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The line ordinal a seq names (`12` or `"12.3"`).
fn line_of(seq: &Value) -> usize {
    match seq {
        Value::Number(n) => n.as_u64().unwrap() as usize,
        Value::String(s) => s.split('.').next().unwrap().parse().unwrap(),
        _ => panic!("seq {seq} is neither a number nor a string"),
    }
}

fn seq_text(seq: &Value) -> String {
    match seq {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `harness normalize-events ADAPTER < log`.
fn normalized(adapter: &str, log: &Path) -> Vec<Value> {
    let out = Command::new(bin())
        .args(["normalize-events", adapter, "--run", "r", "--task", "t"])
        .stdin(std::fs::File::open(log).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "normalize-events failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The canary for the next CLI release: every line the real CLI printed maps to an event (no
/// `unmapped`, broken-shape or non-JSON error). Returns how many lines and events were checked.
fn assert_all_mapped(adapter: &str, log: &Path) -> (usize, usize) {
    let events = normalized(adapter, log);
    let bad: Vec<&Value> = events.iter().filter(|e| e["type"] == "error" && unmappable(e)).collect();
    assert!(bad.is_empty(), "{}: the normalizer could not map {} line(s): {bad:#?}", log.display(), bad.len());
    (std::fs::read_to_string(log).unwrap().lines().count(), events.len())
}

/// Every log of a run's logs dir through the canary (task logs by their adapter, review logs as codex).
fn assert_run_mapped(r: &Real, slug: &str, adapters: &[(&str, &str)]) {
    let dir = r.b.repo().join(format!("runstate/{slug}.logs"));
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".log") {
            continue;
        }
        let adapter = if name.ends_with(".review.log") {
            "codex"
        } else {
            adapters.iter().find(|(t, _)| name == format!("{t}.log")).map(|(_, a)| *a).unwrap_or("claude")
        };
        if name.ends_with(".gate.log") {
            continue;
        }
        assert_all_mapped(adapter, &e.path());
    }
}

/// Processes with this test's engine HOME other than harness itself: the wrappers, the real CLIs and
/// whatever they started.
fn engine_processes(env: &RealEnv) -> Vec<u32> {
    let harness = bin().canonicalize().unwrap();
    processes_with_env(&format!("HOME={}", env.home.display()))
        .into_iter()
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).map_or(true, |exe| exe != harness))
        .collect()
}

#[test]
fn claude_tool_turn_streams_every_event_at_its_line_and_keeps_the_assigned_session() {
    let Some(r) = Real::new() else { return };
    let plan = r#"{"v":"plan/v1","slug":"tool","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"Run echo hi into hi.txt and report. [anthropic:run:echo hi | tee hi.txt]","gate":"true"},
        {"id":"B","wave":2,"adapter":"claude","prompt":"Say hi."}]}"#;
    let mut sup = r.start(plan);
    let api = ApiProc::start(&r.b.home(), &[]);
    let run = r.b.run_id();
    let mut c = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    assert_eq!(c.status, 200);
    let events = until_exit(&mut c);
    assert_eq!(sup.wait_exit(T), 0, "{}", r.b.supervisor_log());
    r.b.wait_state("A", "committed", T);
    // The tool's file is the task's one commit (a turn that changed nothing commits nothing).
    assert_eq!(r.b.commits_of("A"), 1);
    assert_eq!(files_of(&r.b.repo(), &r.b.commit_of("A")), ["hi.txt"]);
    // Wave 2 ran after A's commit, with its own session; claude quoted A's commit to it, yet it only
    // answered (no tool).
    r.b.wait_state("B", "committed", T);
    let b_log = json_lines(&r.log("tool", "B.log"));
    assert!(!b_log.iter().any(|l| l["type"] == "user"), "B ran no tool");
    assert_ne!(b_log[0]["session_id"], json_lines(&r.log("tool", "A.log"))[0]["session_id"]);

    // The kinds, in order (runs of token deltas folded).
    let mut kinds: Vec<&str> = Vec::new();
    for (_, e) in &events {
        let t = e["type"].as_str().unwrap();
        if kinds.last() != Some(&t) {
            kinds.push(t);
        }
    }
    assert_eq!(
        kinds,
        ["turn_start", "token_delta", "tool_call", "tool_result", "token_delta", "turn_end", "exit"],
        "{events:#?}"
    );
    assert!(events.iter().any(|(_, e)| e["type"] == "token_delta" && e["data"]["final"].is_null()), "partial deltas");

    // Each event's seq names the line of the real log it came from.
    let log = json_lines(&r.log("tool", "A.log"));
    for (id, e) in &events {
        assert_eq!(id.as_deref(), Some(seq_text(&e["seq"]).as_str()), "SSE id is the seq");
        let line = &log[line_of(&e["seq"]) - 1];
        let ok = match e["type"].as_str().unwrap() {
            "turn_start" => line["type"] == "system" && line["subtype"] == "init",
            "token_delta" if e["data"]["final"] == true => {
                line["type"] == "assistant" && line["message"]["content"][0]["text"] == e["data"]["text"]
            }
            "token_delta" => line["type"] == "stream_event" && line["event"]["delta"]["text"] == e["data"]["text"],
            "tool_call" => {
                line["type"] == "assistant"
                    && e["data"]["name"] == "Bash"
                    && e["data"]["args"]["command"] == "echo hi | tee hi.txt"
                    && line["message"]["content"][0]["input"] == e["data"]["args"]
            }
            "tool_result" => line["type"] == "user" && e["data"]["output"] == "hi" && e["data"]["is_error"] == false,
            "turn_end" => line["type"] == "result" && e["data"]["is_error"] == false,
            "exit" => line["harness"] == "exit" && e["data"]["rc"] == 0 && line_of(&e["seq"]) == log.len(),
            other => panic!("unexpected event {other}"),
        };
        assert!(ok, "event {e} does not match line {}: {line}", line_of(&e["seq"]));
    }
    // The durable endpoint serves the same events.
    let paged = durable_events(&api, &run, "A");
    assert_eq!(
        paged.iter().map(|e| seq_text(&e["seq"])).collect::<Vec<_>>(),
        events.iter().map(|(_, e)| seq_text(&e["seq"])).collect::<Vec<_>>()
    );

    // The session is the uuid the harness assigned before the turn, end to end.
    let recs = r.task_records("A");
    let assigned = recs[0]["session_id"].as_str().expect("leased carries the assigned session").to_string();
    assert_eq!(recs[0]["state"], "leased");
    assert!(uuid::Uuid::parse_str(&assigned).is_ok(), "{assigned}");
    let implemented = recs.iter().find(|r| r["state"] == "implemented").unwrap();
    assert_eq!(implemented["session_id"], assigned, "the status line's session_id");
    assert!(log.iter().filter(|l| l.get("session_id").is_some()).all(|l| l["session_id"] == assigned.as_str()));
    assert!(events.iter().all(|(_, e)| e["session"] == assigned.as_str()));
    // The tool really ran: the CLI sent its output back to the model.
    let msgs = r.s.requests_to("/v1/messages");
    assert_eq!(msgs.len(), 3, "A: one request per model turn; B: one");
    assert!(
        msgs[2].body["messages"].to_string().contains("A: Run echo hi into hi.txt and report."),
        "B saw A's commit"
    );
    assert!(msgs[1].body["messages"].to_string().contains(r#""content":"hi""#), "tool_result sent: {}", msgs[1].body);
    assert_run_mapped(&r, "tool", &[("A", "claude"), ("B", "claude")]);
    eprintln!(
        "claude tool turn: {} events over {} log lines, kinds {kinds:?}, seqs {}..{}, session {assigned}",
        events.len(),
        log.len(),
        seq_text(&events[0].1["seq"]),
        seq_text(&events[events.len() - 1].1["seq"])
    );
}

#[test]
fn steer_resumes_the_real_session_with_the_earlier_turns_and_reruns_the_gate() {
    let Some(r) = Real::new() else { return };
    let gates = r.b.dir.path().join("gates.txt");
    let plan = json!({"v":"plan/v1","slug":"steer","tasks":[{"id":"A","wave":1,"adapter":"claude",
        "prompt":"Say hi. first-prompt-marker","gate":format!("echo gate >> {} && sleep 2", gates.display())}]})
    .to_string();
    let mut sup = r.start(&plan);
    let api = ApiProc::start(&r.b.home(), &[]);
    let run = r.b.run_id();
    // Steer while the gate of the first turn runs: the message waits for the next turn boundary.
    wait_for(T, || std::fs::read_to_string(&gates).ok().filter(|s| s.lines().count() == 1))
        .unwrap_or_else(|| panic!("the gate never ran: {}", r.b.supervisor_log()));
    let steer = "Also run a command. steer-marker [anthropic:tool]";
    let resp = r.post(&api, &format!("/runs/{run}/tasks/A/steer"), &json!({"msg": steer, "by": "tester"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(sup.wait_exit(T), 0, "{}", r.b.supervisor_log());
    r.b.wait_state("A", "committed", T);

    // The gate ran once per turn; the steer was queued, then applied.
    assert_eq!(std::fs::read_to_string(&gates).unwrap().lines().count(), 2, "the gate re-ran after the steered turn");
    let states: Vec<String> = r.task_records("A").iter().map(|r| r["state"].as_str().unwrap().to_string()).collect();
    assert_eq!(states.iter().filter(|s| *s == "gated").count(), 2, "{states:?}");
    assert_eq!(states.last().unwrap(), "committed");
    let steers = r.b.controls("steer");
    assert_eq!(steers.iter().map(|s| s["outcome"].as_str().unwrap()).collect::<Vec<_>>(), ["queued", "applied"]);

    // The real CLI was resumed with the same session: both turns' lines carry it.
    let log = json_lines(&r.log("steer", "A.log"));
    let inits: Vec<&Value> = log.iter().filter(|l| l["type"] == "system" && l["subtype"] == "init").collect();
    assert_eq!(inits.len(), 2, "two turns");
    assert_eq!(inits[0]["session_id"], inits[1]["session_id"]);
    let session = inits[0]["session_id"].as_str().unwrap();
    assert!(r.task_records("A").iter().filter(|r| r["state"] == "leased").all(|r| r["session_id"] == session));
    // The stand-in saw the earlier turn (prompt and answer) ahead of the steer message.
    let msgs = r.s.requests_to("/v1/messages");
    let resumed = msgs
        .iter()
        .find(|q| q.body["messages"].to_string().contains("steer-marker"))
        .expect("a request with the steer");
    let convo = resumed.body["messages"].as_array().unwrap();
    let text = |m: &Value| m["content"].to_string();
    let first = convo
        .iter()
        .position(|m| m["role"] == "user" && text(m).contains("first-prompt-marker"))
        .expect("turn 1 prompt");
    let answer =
        convo.iter().position(|m| m["role"] == "assistant" && text(m).contains("Hi there!")).expect("turn 1 answer");
    let last_user = convo.iter().rposition(|m| m["role"] == "user").unwrap();
    assert!(first < answer && answer < last_user, "order: {convo:#?}");
    assert!(text(&convo[last_user]).contains("steer-marker"));
    // The steered turn ran its tool.
    assert!(log.iter().any(|l| l["type"] == "user" && l["tool_use_result"]["stdout"] == "hi"));
    assert_run_mapped(&r, "steer", &[("A", "claude")]);
    // Usage (spec/USAGE.md): the resumed process reports the session's cumulative cost, so the
    // task's cost is its last total, not the sum of both; the tokens are the turns' own, summed.
    let results: Vec<&Value> = log.iter().filter(|l| l["type"] == "result").collect();
    assert_eq!(results.len(), 2);
    let (first, last) =
        (results[0]["total_cost_usd"].as_f64().unwrap(), results[1]["total_cost_usd"].as_f64().unwrap());
    assert!(last > first, "the resumed process carries the session's cost on: {first} then {last}");
    let usage = api.get(&format!("/runs/{run}/tasks/A")).json()["usage"].clone();
    assert!((usage["cost_usd"].as_f64().unwrap() - last).abs() < 1e-9, "{usage} vs last total {last}");
    let own: u64 = results.iter().map(|l| l["usage"]["input_tokens"].as_u64().unwrap()).sum();
    assert_eq!((usage["input_tokens"].as_u64(), usage["turns"].as_u64()), (Some(own), Some(2)), "{usage}");
    eprintln!(
        "steer: states {states:?}; gate ran 2 times; session {session} resumed; the resumed request carried {} messages",
        convo.len()
    );
}

#[test]
fn kill_mid_stream_leaves_no_claude_process_and_the_stream_ends_with_exit() {
    let Some(r) = Real::new() else { return };
    let plan = r#"{"v":"plan/v1","slug":"kill","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"Talk slowly. [anthropic:slow:600:100]"}]}"#;
    let mut sup = r.start(plan);
    let api = ApiProc::start(&r.b.home(), &[]);
    let run = r.b.run_id();
    let mut c = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    let mut seen = Vec::new();
    while seen.iter().filter(|e: &&Value| e["type"] == "token_delta").count() < 3 {
        seen.push(serde_json::from_str(&c.next_event().expect("an event").data).unwrap());
    }
    let pgid = control(&r.b.sock(), &json!({"verb":"status"}))["tasks"]["A"]["pgid"].as_i64().unwrap() as i32;
    assert!(!engine_processes(&r.env).is_empty(), "claude is running");
    let resp = r.post(&api, &format!("/runs/{run}/tasks/A/kill"), &json!({"by":"tester"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["state"], "halted");
    assert_eq!(resp.json()["rc"], 143);
    // Acknowledged = gone: nothing left in the group, no process of the real CLI.
    assert!(
        !harness::supervisor::kill::group_alive(pgid),
        "left: {:?}",
        harness::supervisor::kill::group_members(pgid)
    );
    assert_eq!(engine_processes(&r.env), Vec::<u32>::new(), "claude processes left after the kill");
    let rest = until_exit(&mut c);
    let exit = &rest.last().unwrap().1;
    assert_eq!(exit["data"]["rc"], 143);
    let log = json_lines(&r.log("kill", "A.log"));
    assert!(!log.iter().any(|l| l["type"] == "result"), "a killed claude prints no result line");
    assert_eq!(log.last().unwrap()["harness"], "exit");
    assert_eq!(log.last().unwrap()["rc"], 143);
    assert!(log.iter().filter(|l| l["type"] == "stream_event").count() >= 3);
    let a = &r.b.view()["tasks"]["A"];
    assert_eq!(a["state"], "halted");
    assert_eq!(a["rc"], 143);
    assert_eq!(a["detail"], "killed by tester");
    // A halted task keeps the run open for a steer; stop the supervisor.
    control(&r.b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
    assert_run_mapped(&r, "kill", &[("A", "claude")]);
    eprintln!(
        "kill: answered {} in {} ms; {} log lines, {} stream_event lines, no result line, last line {}",
        resp.status,
        resp.json()["elapsed_ms"],
        log.len(),
        log.iter().filter(|l| l["type"] == "stream_event").count(),
        serde_json::to_string(log.last().unwrap()).unwrap()
    );
}

#[test]
fn codex_review_seat_gives_real_verdicts_refuses_steer_and_is_killable() {
    let Some(r) = Real::new() else { return };
    let plan = r#"{"v":"plan/v1","slug":"seat","max_parallel":3,"tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"Make the change. [openai:approve]","gate":"true","review":true},
        {"id":"B","wave":1,"adapter":"claude","prompt":"Make another change. [openai:reject]","review":true},
        {"id":"R","wave":1,"adapter":"codex","prompt":"Review slowly. [openai:slow:600:100]"}]}"#;
    let mut sup = r.start(plan);
    let api = ApiProc::start(&r.b.home(), &[]);
    let run = r.b.run_id();
    // R (a codex task: itself a verdict seat) is mid-turn once the stand-in streams to it.
    wait_for(T, || r.s.sent().iter().any(|s| s.text == "d2 ").then_some(()))
        .unwrap_or_else(|| panic!("codex never streamed: {}", r.b.supervisor_log()));
    let resp = r.post(&api, &format!("/runs/{run}/tasks/R/steer"), &json!({"msg":"approve it"}));
    assert_eq!(resp.status, 409, "{}", resp.text());
    let pgid = control(&r.b.sock(), &json!({"verb":"status"}))["tasks"]["R"]["pgid"].as_i64().unwrap() as i32;
    let resp = r.post(&api, &format!("/runs/{run}/tasks/R/kill"), &json!({"by":"tester"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["state"], "halted");
    assert!(
        !harness::supervisor::kill::group_alive(pgid),
        "left: {:?}",
        harness::supervisor::kill::group_members(pgid)
    );

    r.b.wait_state("A", "committed", T);
    r.b.wait_state("B", "halted", T);
    control(&r.b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
    let view = r.b.view();
    // The verdicts come from the real agent_message of the review seat.
    assert_eq!(view["tasks"]["B"]["detail"], "review rejected: REJECT: the change is missing a test");
    for t in ["A", "B"] {
        let review = json_lines(&r.log("seat", &format!("{t}.review.log")));
        let thread = review[0]["thread_id"].as_str().expect("first event is thread.started");
        assert_eq!(review[0]["type"], "thread.started");
        let msg =
            review.iter().rfind(|l| l["type"] == "item.completed" && l["item"]["type"] == "agent_message").unwrap();
        let want = if t == "A" { "APPROVE" } else { "REJECT:" };
        assert!(msg["item"]["text"].as_str().unwrap().starts_with(want), "{msg}");
        assert_eq!(review.last().unwrap()["session_id"], thread, "exit marker carries the thread id");
    }
    assert!(r.task_records("A").iter().any(|r| r["state"] == "reviewed"));
    // R: its session is the thread_id of its first event; the stream shows the kill's exit.
    let rlog = json_lines(&r.log("seat", "R.log"));
    assert_eq!(rlog[0]["type"], "thread.started");
    let thread = rlog[0]["thread_id"].as_str().unwrap();
    assert_eq!(view["tasks"]["R"]["session_id"], thread);
    assert_eq!(view["tasks"]["R"]["rc"], 143);
    let events = durable_events(&api, &run, "R");
    assert_eq!(events[0]["type"], "turn_start");
    assert_eq!(events[0]["session"], thread);
    assert_eq!(events.last().unwrap()["type"], "exit");
    assert_eq!(events.last().unwrap()["data"]["rc"], 143);
    assert!(!rlog.iter().any(|l| l["type"] == "turn.completed"));
    assert_run_mapped(&r, "seat", &[("A", "claude"), ("B", "claude"), ("R", "codex")]);
    eprintln!(
        "codex seat: A {} ({}), B {} ({}), R {} rc {} session {thread}",
        view["tasks"]["A"]["state"],
        view["tasks"]["A"]["detail"],
        view["tasks"]["B"]["state"],
        view["tasks"]["B"]["detail"],
        view["tasks"]["R"]["state"],
        view["tasks"]["R"]["rc"]
    );
}

#[test]
fn the_contract_probe_passes_against_both_real_clis() {
    let s = StandIn::start();
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = RealEnv::new(dir.path(), &s) else { return };
    let mut c = Command::new(repo_dir().join("wrappers/_contract-probe.sh"));
    c.args(["na.sh", "codex.sh"]).env("HARNESS_PROBE_REAL", "1").env("HARNESS_PROBE_STANDIN", "1");
    env.apply(&mut c);
    let out = c.stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "probe failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("FAIL"), "{text}");
    for section in ["na.sh (real claude", "codex.sh (real codex"] {
        let at = text.find(section).unwrap_or_else(|| panic!("no {section} section:\n{text}"));
        // Turn, shape, session, marker, resume, append, HTTP error → 3, timeout → 124, its marker.
        let oks =
            text[at..].lines().skip(1).take_while(|l| l.starts_with("  ")).filter(|l| l.starts_with("  ok")).count();
        assert_eq!(oks, 9, "{section}: {text}");
    }
    assert!(!text.contains("skipped"), "a real CLI was skipped:\n{text}");
    eprintln!("{text}");
}

/// One capture: a wrapper turn against the stand-in, its log kept as a fixture when asked.
struct Capture<'a> {
    dir: &'a Path,
    env: &'a RealEnv,
    repo: PathBuf,
}

impl Capture<'_> {
    /// Runs the engine's wrapper with `prompt` (and extra flags), its log at `<engine>/<name>.log`. With
    /// `kill_after`, the wrapper's group gets SIGTERM 300 ms after that stand-in starts streaming.
    /// Returns (exit code, status line).
    fn turn(
        &self,
        engine: &str,
        name: &str,
        prompt: &str,
        extra: &[&str],
        kill_after: Option<&StandIn>,
    ) -> (i32, Value) {
        let wrapper = if engine == "claude" { "na.sh" } else { "codex.sh" };
        let prompt_file = self.dir.join(format!("{engine}-{name}.prompt"));
        std::fs::write(&prompt_file, prompt).unwrap();
        let log = self.dir.join(engine).join(format!("{name}.log"));
        let mut c = Command::new(repo_dir().join("wrappers").join(wrapper));
        c.arg("--prompt-file").arg(&prompt_file).arg("--cwd").arg(&self.repo).arg("--log").arg(&log);
        c.args(["--timeout", "60"]).args(extra).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        self.env.apply(&mut c);
        use std::os::unix::process::CommandExt;
        c.process_group(0);
        let child = c.spawn().unwrap();
        if let Some(s) = kill_after {
            wait_for(T, || (!s.sent().is_empty()).then_some(())).expect("the stand-in never streamed");
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: signalling the process group this test just started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
        }
        let out = child.wait_with_output().unwrap();
        let status = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap_or(Value::Null);
        (out.status.code().unwrap_or(-1), status)
    }
}

/// The canary over a spread of real-CLI behaviour (text, tool, slow stream, HTTP errors, resume,
/// SIGTERM mid-stream, verdicts), run through the wrappers. With `HARNESS_CAPTURE_DIR` set, the raw
/// engine output of each turn is written there as fresh fixtures (`<engine>/<name>.jsonl`, `.stderr`,
/// `.rc`, exit markers removed).
#[test]
fn the_normalizer_maps_everything_the_real_clis_print() {
    let s = StandIn::start();
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = RealEnv::new(dir.path(), &s) else { return };
    let repo = dir.path().join("repo");
    git_repo(&repo);
    let cap = Capture { dir: dir.path(), env: &env, repo };
    let mut outcomes = Vec::new();
    let sid = uuid::Uuid::new_v4().to_string();
    outcomes.push(("claude", "basic", cap.turn("claude", "basic", "Say hi.", &["--session-id", &sid], None)));
    outcomes.push(("claude", "resume", cap.turn("claude", "resume", "Again.", &["--resume", &sid], None)));
    outcomes.push(("claude", "tool", cap.turn("claude", "tool", "Run it. [anthropic:tool]", &[], None)));
    outcomes.push(("claude", "slow", cap.turn("claude", "slow", "Slowly. [anthropic:slow:20:20]", &[], None)));
    outcomes.push(("claude", "error", cap.turn("claude", "error", "Fail. [anthropic:error:529]", &[], None)));
    outcomes.push(("codex", "approve", cap.turn("codex", "approve", "Review. [openai:approve]", &[], None)));
    outcomes.push(("codex", "reject", cap.turn("codex", "reject", "Review. [openai:reject]", &[], None)));
    outcomes.push(("codex", "tool", cap.turn("codex", "tool", "Run it. [openai:tool]", &[], None)));
    outcomes.push(("codex", "error", cap.turn("codex", "error", "Fail. [openai:error:500]", &[], None)));
    let thread = outcomes[5].2.1["session_id"].as_str().expect("codex session").to_string();
    outcomes.push((
        "codex",
        "resume",
        cap.turn("codex", "resume", "Again. [openai:approve]", &["--resume", &thread], None),
    ));
    s.clear_sent();
    outcomes.push((
        "claude",
        "sigterm",
        cap.turn("claude", "sigterm", "Slowly. [anthropic:slow:600:100]", &[], Some(&s)),
    ));
    s.clear_sent();
    outcomes.push(("codex", "sigterm", cap.turn("codex", "sigterm", "Slowly. [openai:slow:600:100]", &[], Some(&s))));

    let want = |engine: &str, name: &str| -> i32 {
        match (engine, name) {
            (_, "error") => 3,
            (_, "sigterm") => 143,
            ("codex", "tool") => 3, // no verdict: the seat's answer must start with APPROVE or REJECT
            _ => 0,
        }
    };
    let mut total = (0, 0);
    for (engine, name, (rc, status)) in &outcomes {
        assert_eq!(*rc, want(engine, name), "{engine}/{name}: {status}");
        let log = dir.path().join(engine).join(format!("{name}.log"));
        let (l, e) = assert_all_mapped(engine, &log);
        total = (total.0 + l, total.1 + e);
    }
    assert_eq!(outcomes[0].2.1["session_id"], sid.as_str(), "the status line reports the assigned session");
    assert_eq!(outcomes[1].2.1["session_id"], sid.as_str(), "claude resume keeps the session");
    assert_eq!(outcomes[9].2.1["session_id"], thread.as_str(), "codex resume keeps the thread");
    eprintln!(
        "canary: {} lines from {} real-CLI turns mapped to {} events, 0 unmapped",
        total.0,
        outcomes.len(),
        total.1
    );

    if let Some(out) = std::env::var_os("HARNESS_CAPTURE_DIR") {
        let out = PathBuf::from(out);
        for (engine, name, (rc, _)) in &outcomes {
            let log = dir.path().join(engine).join(format!("{name}.log"));
            let raw: String = std::fs::read_to_string(&log)
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with(r#"{"harness":"exit""#))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::create_dir_all(out.join(engine)).unwrap();
            std::fs::write(out.join(engine).join(format!("{name}.jsonl")), raw).unwrap();
            std::fs::copy(format!("{}.stderr", log.display()), out.join(engine).join(format!("{name}.stderr")))
                .unwrap();
            std::fs::write(out.join(engine).join(format!("{name}.rc")), format!("{rc}\n")).unwrap();
        }
        eprintln!("captured {} turns into {}", outcomes.len(), out.display());
    }
}
