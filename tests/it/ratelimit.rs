//! Rate limits: a turn cut by one (the fake claude prints a rejected `rate_limit_event` whose reset
//! is 2 s ahead and a 429 result) halts its task `rate_limited`, pauses the run (`pause_reason:
//! rate_limit`, `resume_at`), and the supervisor resumes by itself at `resume_at`, re-dispatching
//! the task by resume of its session; `on_rate_limit: "halt"` opts out.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[test]
fn a_rate_limited_turn_pauses_the_run_which_resumes_by_itself_and_resumes_the_task() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"limited","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"work"}]});
    let mut sup = b.start_supervised(&plan.to_string(), "ratelimit,success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let paused = wait_for(T, || {
        let v = api.get(&format!("/runs/{run}")).json();
        (v["pause_reason"] == "rate_limit").then_some(v)
    })
    .expect("paused by the rate limit");
    assert!(paused["resume_at"].as_str().is_some(), "{paused:#}");
    let halted = b.journal().into_iter().find(|r| r["kind"] == "task" && r["state"] == "halted").unwrap();
    assert!(
        halted["detail"].as_str().unwrap().starts_with("rate_limited: claude: API error 429 (lifts at "),
        "{halted}"
    );
    assert_eq!(sup.wait_exit(T), 0, "{}", b.supervisor_log());
    assert_eq!(b.view()["status"], "finished");
    b.wait_state("A", "committed", T);
    let runs: Vec<(String, String)> = b
        .journal()
        .iter()
        .filter(|r| r["kind"] == "run" && (r["event"] == "paused" || r["event"] == "resumed"))
        .map(|r| (r["event"].as_str().unwrap().to_string(), r["by"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(runs, vec![("paused".into(), "rate_limit".into()), ("resumed".into(), "rate_limit".into())]);
    // The second turn resumed the first's session.
    let rec = b.records();
    assert_eq!(rec.len(), 2, "{rec:?}");
    let argv: Vec<String> =
        rec[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    let session = b.journal().into_iter().find(|r| r["state"] == "leased").unwrap()["session_id"].clone();
    let i = argv.iter().position(|a| a == "--resume").expect("resumed");
    assert_eq!(json!(argv[i + 1]), session);
    assert_journal_valid(&b.journal());
}

#[test]
fn on_rate_limit_halt_only_halts_the_task() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"halting","on_rate_limit":"halt",
        "tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"work"}]});
    let _sup = b.start_supervised(&plan.to_string(), "ratelimit,success", &[]);
    b.wait_state("A", "halted", T);
    std::thread::sleep(Duration::from_millis(3000));
    assert_eq!(b.state("A").as_deref(), Some("halted"), "not resumed");
    assert!(!b.journal().iter().any(|r| r["kind"] == "run" && r["event"] == "paused"));
}

#[test]
fn a_reset_centuries_ahead_is_clamped_to_a_day_and_said_so() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"far","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"work"}]});
    let p = b.plan(&plan.to_string());
    // The year 5138 (and an overflow before the clamp existed).
    let mut sup = Proc {
        child: b
            .harness("ratelimit,success")
            .env("HARNESS_FAKE_RESET_S", "99999999999")
            .args(["run", "--supervised", "--foreground", "--kill-grace", "1s"])
            .arg(&p)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    };
    let halted = wait_for(T, || {
        b.try_run_id().and_then(|_| {
            let j = json_lines(&b.repo().join("runstate/far.jsonl"));
            j.into_iter().find(|r| r["kind"] == "task" && r["state"] == "halted")
        })
    })
    .expect("halted by the rate limit");
    let d = halted["detail"].as_str().unwrap();
    assert!(d.contains("clamped to 24 h"), "{d}");
    // What the engine said, as a time a person reads (RFC 3339), not as Unix seconds.
    let said = d.split_once("the engine said ").and_then(|(_, r)| r.split_once(", clamped")).map(|(t, _)| t);
    let said = said.unwrap_or_else(|| panic!("no 'the engine said …, clamped': {d}"));
    let said = humantime::parse_rfc3339(said).unwrap_or_else(|e| panic!("{said:?} is not RFC 3339 ({e}): {d}"));
    let ahead = said.duration_since(std::time::SystemTime::now()).unwrap().as_secs();
    assert!(ahead > 99_999_999_000, "the engine's own time, {ahead} s ahead: {d}");
    let paused =
        wait_for(T, || b.journal().into_iter().find(|r| r["kind"] == "run" && r["event"] == "paused")).unwrap();
    let at = humantime::parse_rfc3339_weak(paused["resume_at"].as_str().unwrap()).unwrap();
    let ahead = at.duration_since(std::time::SystemTime::now()).unwrap().as_secs();
    assert!((86_000..=86_400).contains(&ahead), "resumes within a day: {ahead} s");
    control(&b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
}
