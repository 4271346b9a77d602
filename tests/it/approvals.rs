//! Tool calls asked of the operator (plan `approvals: "ask"`), with the real Claude Code CLI offline
//! against the model stand-in: over the live channel (`can_use_tool`) and, for batch tasks, through
//! `harness approval-mcp`. Allow runs the tool; deny's message reaches the model; the plan's timeout
//! denies; an `approve` rule allows without asking; a second decision is 409; a supervisor killed with
//! an approval pending leaves it `expired` and the task is resumed. `.ci/run` installs the pinned CLI;
//! elsewhere these tests say `SKIPPED` and pass.

use crate::common::real::RealEnv;
use crate::common::standin::StandIn;
use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(90);

struct Ask {
    b: Bench,
    s: StandIn,
    env: RealEnv,
}

impl Ask {
    fn new() -> Option<Ask> {
        let b = Bench::new();
        let s = StandIn::start();
        let env = RealEnv::new(b.dir.path(), &s)?;
        Some(Ask { b, s, env })
    }
    /// A one-task plan whose claude task may only Read unasked and runs `touch tool-ran.txt` through
    /// Bash (not a read-only command: claude asks for it).
    fn start(&self, task: Value, plan_extra: Value) -> Proc {
        let mut t = json!({"id":"A","wave":1,"adapter":"claude","prompt":"Run a command. [anthropic:run:touch tool-ran.txt]",
            "approvals":"ask","allowed_tools":"Read"});
        t.as_object_mut().unwrap().extend(task.as_object().unwrap().clone());
        let mut plan = json!({"v":"plan/v1","slug":"ask","tasks":[t]});
        plan.as_object_mut().unwrap().extend(plan_extra.as_object().unwrap().clone());
        self.b.start_supervised_with(&plan.to_string(), "success", &[], &self.env.vars())
    }
    fn approvals(&self, api: &ApiProc, query: &str) -> Vec<Value> {
        let r = api.get(&format!("/runs/{}/approvals{query}", self.b.run_id()));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["approvals"].as_array().unwrap().clone()
    }
    fn wait_pending(&self, api: &ApiProc) -> Value {
        wait_for(T, || self.approvals(api, "?state=pending").into_iter().next()).unwrap_or_else(|| {
            let log: Vec<String> = self
                .log()
                .iter()
                .filter(|l| l["type"] != "stream_event")
                .map(|l| l.to_string().chars().take(400).collect())
                .collect();
            panic!("no pending approval: {}\nlog:\n{}", self.b.supervisor_log(), log.join("\n"))
        })
    }
    fn decide(&self, api: &ApiProc, id: &str, body: Value) -> Resp {
        http(
            api.port,
            "POST",
            &format!("/runs/{}/tasks/A/approvals/{id}", self.b.run_id()),
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        )
    }
    fn log(&self) -> Vec<Value> {
        json_lines(&self.b.repo().join("runstate/ask.logs/A.log"))
    }
    /// Whether the Bash call ran (its result is not an error) — and its file is in the task's commit.
    fn ran_echo(&self) -> bool {
        let ran = self.log().iter().any(|l| {
            l["type"] == "user"
                && l["message"]["content"][0]["type"] == "tool_result"
                && l["message"]["content"][0]["is_error"] == false
        });
        let out = std::process::Command::new("git")
            .args(["log", "--all", "--name-only", "--format="])
            .current_dir(self.b.repo())
            .output()
            .unwrap();
        ran && String::from_utf8_lossy(&out.stdout).lines().any(|l| l == "tool-ran.txt")
    }
}

#[test]
fn live_allow_runs_the_tool_after_an_api_restart_and_a_second_decision_is_409() {
    let Some(a) = Ask::new() else { return };
    let mut sup = a.start(json!({"live": true}), json!({}));
    let first = ApiProc::start(&a.b.home(), &[]);
    let p = a.wait_pending(&first);
    // A pending approval survives an API restart: the fresh API lists it (the journal holds it).
    drop(first);
    let api = ApiProc::start(&a.b.home(), &[]);
    assert_eq!(a.approvals(&api, "?state=pending"), vec![p.clone()], "listed again after the API's restart");
    assert_eq!((p["tool"].as_str(), p["via"].as_str()), (Some("Bash"), Some("live")), "{p}");
    assert_eq!(p["input"]["command"], "touch tool-ran.txt");
    let id = p["id"].as_str().unwrap().to_string();
    // The stream shows the ask where claude made it.
    let events = api.get(&format!("/runs/{}/tasks/A/events?limit=5000", a.b.run_id())).text();
    assert!(
        events.lines().any(|l| l.contains("\"type\":\"approval\"") && l.contains(&id) && l.contains("\"pending\"")),
        "{events}"
    );
    assert_eq!(a.decide(&api, "no-such-id", json!({"decision":"allow"})).status, 404);
    let r = a.decide(&api, &id, json!({"decision":"allow","by":"tester"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["approval"]["state"], "allowed");
    let again = a.decide(&api, &id, json!({"decision":"deny","message":"too late"}));
    assert_eq!(again.status, 409, "{}", again.text());
    assert!(again.json()["detail"].as_str().unwrap().contains("already allowed (by tester)"));
    assert_eq!(sup.wait_exit(T), 0, "{}", a.b.supervisor_log());
    assert!(a.ran_echo(), "the allowed tool ran");
    let all = a.approvals(&api, "");
    assert_eq!(all.len(), 1);
    assert_eq!((all[0]["state"].as_str(), all[0]["by"].as_str()), (Some("allowed"), Some("tester")));
}

#[test]
fn live_deny_message_reaches_the_model_and_the_timeout_denies() {
    let Some(a) = Ask::new() else { return };
    // Two asks: the first denied by the operator; the model asks again (stand-in's follow-up runs no
    // tool), so the timeout is shown on a second run below.
    let mut sup = a.start(json!({"live": true}), json!({}));
    let api = ApiProc::start(&a.b.home(), &[]);
    let p = a.wait_pending(&api);
    let id = p["id"].as_str().unwrap().to_string();
    let r = a.decide(&api, &id, json!({"decision":"deny","message":"no shell today: deny-marker","by":"tester"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sup.wait_exit(T), 0, "{}", a.b.supervisor_log());
    assert!(!a.ran_echo(), "the denied tool did not run");
    let carried =
        a.s.requests_to("/v1/messages").iter().any(|q| q.body["messages"].to_string().contains("deny-marker"));
    assert!(carried, "the model's next request carries the deny message");

    let Some(t) = Ask::new() else { return };
    let mut sup = t.start(json!({"live": true}), json!({"approval_timeout": "2s"}));
    let api = ApiProc::start(&t.b.home(), &[]);
    assert_eq!(sup.wait_exit(T), 0, "{}", t.b.supervisor_log());
    let all = t.approvals(&api, "");
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!((all[0]["state"].as_str(), all[0]["by"].as_str()), (Some("denied"), Some("timeout")));
    assert!(all[0]["message"].as_str().unwrap().contains("No decision within 2 s"));
    assert!(!t.ran_echo());
}

#[test]
fn an_approve_rule_allows_without_asking() {
    let Some(a) = Ask::new() else { return };
    let mut sup = a.start(json!({"live": true}), json!({"approve": ["Bash(touch:*)"]}));
    let api = ApiProc::start(&a.b.home(), &[]);
    assert_eq!(sup.wait_exit(T), 0, "{}", a.b.supervisor_log());
    assert!(a.ran_echo());
    let all = a.approvals(&api, "");
    assert_eq!(all.len(), 1);
    assert_eq!((all[0]["state"].as_str(), all[0]["by"].as_str()), (Some("allowed"), Some("policy")));
    assert_eq!(all[0]["detail"], "rule Bash(touch:*)");
}

#[test]
fn a_batch_task_asks_through_the_mcp_permission_tool() {
    let Some(a) = Ask::new() else { return };
    let mut sup = a.start(json!({}), json!({}));
    let api = ApiProc::start(&a.b.home(), &[]);
    let p = a.wait_pending(&api);
    assert_eq!((p["tool"].as_str(), p["via"].as_str()), (Some("Bash"), Some("mcp")), "{p}");
    let r = a.decide(&api, p["id"].as_str().unwrap(), json!({"decision":"allow"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sup.wait_exit(T), 0, "{}", a.b.supervisor_log());
    assert!(a.ran_echo(), "the allowed tool ran");
}

#[test]
fn a_supervisor_killed_with_an_approval_pending_leaves_it_expired_and_resumes_the_task() {
    let Some(a) = Ask::new() else { return };
    let mut sup = a.start(json!({"live": true}), json!({}));
    let api = ApiProc::start(&a.b.home(), &[]);
    let first = a.wait_pending(&api);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(sup.child.id() as i32, libc::SIGKILL) };
    sup.wait_exit(T);
    // The next supervisor: the approval expires, the turn is resumed (and asks again: allow it).
    let mut next = std::process::Command::new(bin());
    next.env("HARNESS_HOME", a.b.home())
        .env("HARNESS_JOURNAL_FSYNC", "0")
        .env("HARNESS_WRAPPERS", repo_dir().join("wrappers"))
        .current_dir(a.b.repo())
        .args(["supervise", &a.b.run_id()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(a.b.dir.path().join("supervise.log")).unwrap());
    for (k, v) in a.env.vars() {
        next.env(k, v);
    }
    let mut next = Proc { child: next.spawn().unwrap() };
    let expired =
        wait_for(T, || a.approvals(&api, "").into_iter().find(|x| x["id"] == first["id"] && x["state"] == "expired"))
            .expect("the pending approval expired");
    assert!(expired["detail"].as_str().unwrap().contains("restarted"), "{expired}");
    let second = wait_for(T, || a.approvals(&api, "?state=pending").into_iter().next()).expect("asked again");
    assert_ne!(second["id"], first["id"]);
    assert_eq!(a.decide(&api, second["id"].as_str().unwrap(), json!({"decision":"allow"})).status, 200);
    assert_eq!(next.wait_exit(T), 0, "{}", std::fs::read_to_string(a.b.dir.path().join("supervise.log")).unwrap());
    assert!(a.ran_echo());
    let leased: Vec<Value> =
        a.b.journal().into_iter().filter(|r| r["kind"] == "task" && r["state"] == "leased").collect();
    assert_eq!(leased.len(), 2, "re-dispatched once");
    assert_eq!(leased[0]["session_id"], leased[1]["session_id"], "resumed in the same session");
}
