//! Stalls: a running turn whose log stops growing for the plan's `stall_after` gets one `stalled`
//! attention record per stall and its view's `idle_s` grows; `on_stall: "kill"` kills it.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn stalls(b: &Bench) -> Vec<Value> {
    b.journal().into_iter().filter(|r| r["kind"] == "attention" && r["attention"] == "stalled").collect()
}

#[test]
fn a_silent_turn_is_marked_stalled_once_and_its_idle_time_grows() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"stall","stall_after":"1s","tasks":[
        {"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"},
        {"id":"A","wave":1,"adapter":"claude","prompt":"quick"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    wait_for(T, || (!stalls(&b).is_empty()).then_some(())).expect("a stall mark");
    let s = &stalls(&b)[0];
    assert_eq!(s["task"], "H", "{s}");
    assert!(s["idle_s"].as_u64().unwrap() >= 1, "{s}");
    assert!(s["detail"].as_str().unwrap().contains("no output for"), "{s}");
    let idle = |api: &ApiProc| api.get(&format!("/runs/{run}/tasks/H")).json()["live"]["idle_s"].as_f64();
    let first = idle(&api).expect("idle_s is known while the turn runs");
    std::thread::sleep(Duration::from_millis(2500));
    let later = idle(&api).unwrap();
    assert!(later >= first + 2.0, "idle_s grows: {first} then {later}");
    assert_eq!(stalls(&b).len(), 1, "one mark per stall, not one per look");
    b.wait_state("A", "committed", T);
    let t = api.get(&format!("/runs/{run}/tasks/H")).json();
    assert_eq!(t["attention"].as_array().unwrap().len(), 1, "{t:#}");
    assert_eq!(b.state("H").as_deref(), Some("leased"), "a mark kills nothing");
    assert_journal_valid(&b.journal());
}

#[test]
fn on_stall_kill_kills_the_silent_turn() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"stallkill","stall_after":1,"on_stall":"kill","tasks":[
        {"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("H", "halted", T);
    assert_eq!(b.view()["tasks"]["H"]["detail"], "killed by stall");
    assert_eq!(stalls(&b).len(), 1);
    assert!(processes_with_env(&format!("HARNESS_HOME={}", b.home().display())).len() <= 1, "the turn's group is gone");
}

/// "Stalled now", beside the cumulative marks: on the row and the task while the turn is silent;
/// when its output comes back an `unstalled` record ends it (the marks stay counted).
#[test]
fn stalled_now_clears_when_the_output_comes_back() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"unst","stall_after":"1s","tasks":[
        {"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    wait_for(T, || (!stalls(&b).is_empty()).then_some(())).expect("a stall mark");
    let row = api.get("/runs").json()[0].clone();
    assert_eq!((row["stalled"].as_bool(), row["attention_marks"].as_u64()), (Some(true), Some(1)), "{row}");
    let since = row["stalled_since"].as_str().expect("since").to_string();
    assert!(since.as_str() < stalls(&b)[0]["ts"].as_str().unwrap(), "since is when the output stopped: {row}");
    let task = || api.get(&format!("/runs/{run}/tasks/H")).json();
    assert_eq!((task()["stalled"].as_bool(), task()["stalled_since"].as_str()), (Some(true), Some(since.as_str())));
    // The engine speaks again (and keeps speaking): the stall is over.
    let log = b.repo().join("runstate/unst.logs/H.log");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let talker = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
                std::io::Write::write_all(&mut f, b"{\"type\":\"stream_event\",\"event\":{\"type\":\"ping\"}}\n")
                    .unwrap();
                std::thread::sleep(Duration::from_millis(150));
            }
        })
    };
    let unstalled =
        wait_for(T, || b.journal().into_iter().find(|r| r["kind"] == "attention" && r["attention"] == "unstalled"));
    let row = api.get("/runs").json()[0].clone();
    let t = task();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    talker.join().unwrap();
    let u = unstalled.expect("an unstalled record");
    assert_eq!(u["task"], "H", "{u}");
    assert!(u["detail"].as_str().unwrap().contains("output again"), "{u}");
    assert_eq!((row["stalled"].as_bool(), row["stalled_since"].as_str()), (Some(false), None), "{row}");
    assert_eq!(row["attention_marks"], 1, "the marks are cumulative: {row}");
    assert_eq!(t["stalled"], false, "{t}");
    assert_journal_valid(&b.journal());
}
