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
