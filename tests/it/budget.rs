//! Usage and budgets, with the fake claude reporting a chosen cost per turn (`[fake-cost:USD]`):
//! a run's spend crossing its budget pauses it before the next task (journaled as paused by
//! `budget`, shown with its reason in `GET /runs/:runId`); raising the budget resumes it; an explicit
//! resume without raising pauses again at the next turn's end; a task's own budget; `on_budget:
//! "kill"` kills the running turns; bad budget requests are refused and journaled.

use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn post(api: &ApiProc, path: &str, body: &Value) -> Resp {
    http(api.port, "POST", path, &[("Content-Type", "application/json")], Some(body.to_string().as_bytes()))
}

fn task(id: &str, wave: u32, cost: &str) -> Value {
    json!({"id": id, "wave": wave, "adapter": "claude", "prompt": format!("work {id} [fake-cost:{cost}]")})
}

fn budget_pauses(b: &Bench) -> Vec<Value> {
    b.journal().into_iter().filter(|r| r["kind"] == "run" && r["event"] == "paused" && r["by"] == "budget").collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn crossing_the_run_budget_pauses_before_the_next_task_and_raising_it_resumes() {
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"spend","max_parallel":1,"budget_usd":0.5,
        "tasks":[task("A",1,"0.3"), task("B",1,"0.3"), task("C",2,"0.3"), task("D",3,"0.3")]});
    let mut sup = b.start_supervised(&plan.to_string(), "success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    // A (0.3) stays under 0.5; B brings the run to 0.6: paused, C never dispatched.
    wait_for(T, || (!budget_pauses(&b).is_empty()).then_some(())).expect("a pause by budget");
    let pause = &budget_pauses(&b)[0];
    assert_eq!(pause["detail"], "budget: the run spent $0.6000 of its $0.5000 budget", "{pause}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.state("C"), None, "nothing is dispatched after the pause");
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!((v["paused"].as_bool(), v["pause_reason"].as_str()), (Some(true), Some("budget")), "{v:#}");
    assert_eq!(v["budget_usd"], 0.5);
    assert!(close(v["usage"]["cost_usd"].as_f64().unwrap(), 0.6), "{}", v["usage"]);
    assert_eq!((v["usage"]["turns"].as_u64(), v["usage"]["cost"].as_str()), (Some(2), Some("engine")));
    let a = &v["plan"]["waves"][0]["tasks"][0];
    assert!(close(a["usage"]["cost_usd"].as_f64().unwrap(), 0.3), "{a:#}");
    assert_eq!(a["usage"]["input_tokens"], 120, "the fixture turn's own tokens");
    let listed: Vec<Value> = api.get("/runs").json().as_array().unwrap().clone();
    assert!(close(listed[0]["usage"]["cost_usd"].as_f64().unwrap(), 0.6), "GET /runs carries the run's usage");
    let t = api.get(&format!("/runs/{run}/tasks/B")).json();
    assert!(close(t["usage"]["cost_usd"].as_f64().unwrap(), 0.3), "{t:#}");

    // The dashboard's frame shows the run, its spend, why it is paused, and its tasks.
    let api_addr = format!("127.0.0.1:{}", api.port);
    let (code, frame, err) = cli(&b.home(), &["top", "--once", "--api", &api_addr]);
    assert_eq!(code, 0, "{err}");
    let row = frame.lines().find(|l| l.starts_with(&run)).unwrap_or_else(|| panic!("{frame}"));
    assert!(
        row.contains("paused") && row.contains("$0.60") && row.contains("budget") && row.contains("2/4"),
        "{frame}"
    );
    assert!(
        frame.lines().any(|l| l.trim_start().starts_with("A ") && l.contains("done") && l.contains("$0.30")),
        "{frame}"
    );
    assert!(frame.lines().any(|l| l.trim_start().starts_with("C ") && l.contains("waiting")), "{frame}");
    let (code, _, err) = cli(&b.home(), &["top", "--api", &api_addr]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("harness top needs a terminal"), "the live dashboard without one: {err}");
    // A budget the spend still reaches: accepted, still paused.
    let r = post(&api, &format!("/runs/{run}/budget"), &json!({"usd": 0.55}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["paused"], true, "{}", r.text());
    // An explicit resume without raising: C runs, and its turn's end pauses the run again.
    assert_eq!(post(&api, &format!("/runs/{run}/resume"), &json!({})).status, 200);
    wait_for(T, || (budget_pauses(&b).len() == 2).then_some(())).expect("paused again after C");
    b.wait_state("C", "committed", T);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.state("D"), None);
    // Raised above the spend: resumed; D runs and the run finishes.
    let (code, out, err) = cli(&b.home(), &["budget", &run, "5", "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("resumed"), "{out}");
    assert_eq!(sup.wait_exit(T), 0, "{}", b.supervisor_log());
    assert_eq!(b.view()["status"], "finished");
    let budgets: Vec<(Option<f64>, String)> =
        b.controls("budget").iter().map(|c| (c["usd"].as_f64(), c["outcome"].as_str().unwrap().to_string())).collect();
    assert_eq!(budgets, vec![(Some(0.55), "accepted".into()), (Some(5.0), "accepted".into())]);
    let v = api.get(&format!("/runs/{run}")).json();
    assert!(close(v["usage"]["cost_usd"].as_f64().unwrap(), 1.2), "{}", v["usage"]);
    assert_eq!(
        (v["budget_usd"].as_f64(), v["paused"].as_bool(), v["pause_reason"].clone()),
        (Some(5.0), Some(false), Value::Null)
    );
    // Every record written (the budget verbs, the pauses by budget) is valid runstate/v1.
    assert_journal_valid(&b.journal());
}

#[test]
fn a_tasks_own_budget_pauses_the_run_and_bad_budgets_are_refused_on_the_record() {
    let b = Bench::new();
    let mut a = task("A", 1, "0.3");
    a["budget_usd"] = json!(0.2);
    let plan = json!({"v":"plan/v1","slug":"taskbudget","tasks":[a, task("B",2,"0.1")]});
    let mut sup = b.start_supervised(&plan.to_string(), "success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    wait_for(T, || (!budget_pauses(&b).is_empty()).then_some(())).expect("a pause by A's budget");
    assert_eq!(budget_pauses(&b)[0]["detail"], "budget: task A spent $0.3000 of its $0.2000 budget");
    for (body, status, why) in [
        (json!({"usd": -1}), 400, "positive number"),
        (json!({"usd": "5"}), 400, "positive number"),
        (json!({}), 400, "field usd is required"),
        (json!({"usd": 1, "extra": 1}), 400, "unknown field"),
        (json!({"usd": 1, "task": "NOPE"}), 404, "has no task NOPE"),
    ] {
        let r = post(&api, &format!("/runs/{run}/budget"), &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.json()["detail"].as_str().unwrap().contains(why), "{body}: {}", r.text());
    }
    let refused = b.controls("budget").iter().filter(|c| c["outcome"] == "refused").count();
    assert_eq!(refused, 5, "each refusal is journaled");
    assert_eq!(b.state("B"), None);
    let r = post(&api, &format!("/runs/{run}/budget"), &json!({"usd": 1, "task": "A"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["paused"], false);
    assert_eq!(sup.wait_exit(T), 0, "{}", b.supervisor_log());
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!(v["plan"]["waves"][0]["tasks"][0]["budget_usd"], 1.0);
}

#[test]
fn on_budget_kill_kills_the_running_turns() {
    let b = Bench::new();
    let hang = json!({"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"});
    let plan = json!({"v":"plan/v1","slug":"killbudget","budget_usd":0.2,"on_budget":"kill",
        "tasks":[task("A",1,"0.3"), hang]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("H", "halted", T);
    let h = &b.view()["tasks"]["H"];
    assert_eq!(h["detail"], "killed by budget", "{h:#}");
    assert_eq!(budget_pauses(&b).len(), 1);
}
