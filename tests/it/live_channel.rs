//! The live channel with the real Claude Code CLI, offline against the model stand-in (which records
//! every request): a steer written while a tool runs is in the same turn's next model request; a steer
//! with `interrupt: true` starts a new turn in the same process; `/interrupt` ends the turn with the
//! session whole, and a later steer resumes it. `.ci/run` installs the pinned CLI; elsewhere these
//! tests say `SKIPPED` and pass.

use crate::common::real::RealEnv;
use crate::common::standin::StandIn;
use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(90);

struct Live {
    b: Bench,
    s: StandIn,
    env: RealEnv,
}

impl Live {
    fn new() -> Option<Live> {
        let b = Bench::new();
        let s = StandIn::start();
        let env = RealEnv::new(b.dir.path(), &s)?;
        Some(Live { b, s, env })
    }
    fn start(&self, prompt: &str) -> Proc {
        let plan = json!({"v":"plan/v1","slug":"live","tasks":[{"id":"A","wave":1,"adapter":"claude","live":true,
            "prompt":prompt}]})
        .to_string();
        self.b.start_supervised_with(&plan, "success", &[], &self.env.vars())
    }
    fn log(&self) -> Vec<Value> {
        let p = self.b.repo().join("runstate/live.logs/A.log");
        std::fs::read_to_string(p).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
    fn post(&self, api: &ApiProc, path: &str, body: &Value) -> Resp {
        http(api.port, "POST", path, &[("Content-Type", "application/json")], Some(body.to_string().as_bytes()))
    }
    /// Waits until the first tool call of the turn is in the log (the tool is running).
    fn wait_first_tool(&self) {
        wait_for(T, || {
            self.log()
                .iter()
                .any(|l| l["type"] == "assistant" && l["message"]["content"].to_string().contains("TOOL1-DONE"))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("no tool call in the log: {}", self.b.supervisor_log()));
    }
    fn results(&self) -> usize {
        self.log().iter().filter(|l| l["type"] == "result").count()
    }
    fn steer_outcomes(&self, id: &str) -> Vec<String> {
        self.b
            .controls("steer")
            .iter()
            .filter(|c| c["id"] == id)
            .map(|c| c["outcome"].as_str().unwrap().to_string())
            .collect()
    }
}

#[test]
fn a_steer_during_a_tool_reaches_the_same_turns_next_request() {
    let Some(l) = Live::new() else { return };
    let mut sup = l.start("Run two slow steps. [anthropic:twotools:2500]");
    let api = ApiProc::start(&l.b.home(), &[]);
    let run = l.b.run_id();
    l.wait_first_tool();
    let r = l.post(
        &api,
        &format!("/runs/{run}/tasks/A/steer"),
        &json!({"msg":"operator note: mention bananas","by":"tester"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["delivery"], "live", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(sup.wait_exit(T), 0, "{}", l.b.supervisor_log());
    l.b.wait_state("A", "committed", T);
    // The request that carried the first tool's result carried the message too: the same turn.
    let reqs = l.s.requests_to("/v1/messages");
    let next = reqs
        .iter()
        .find(|q| q.body["messages"].to_string().contains("TOOL1-DONE"))
        .expect("a request with the first tool's result");
    let body = next.body["messages"].to_string();
    assert!(body.contains("operator note: mention bananas"), "{body}");
    assert!(!body.contains("TOOL2-DONE"), "the message must arrive before the second tool: {body}");
    assert_eq!(l.results(), 1, "one turn");
    assert_eq!(l.steer_outcomes(&id), ["queued", "delivered", "taken"]);
    // One dispatch: the message did not need a resume.
    let leased = l.b.journal().iter().filter(|r| r["kind"] == "task" && r["state"] == "leased").count();
    assert_eq!(leased, 1);
    // The stream shows the message where claude took it: an `input` event with the steer's id, after
    // the first tool's result and before the second tool's call.
    let events: Vec<Value> = api
        .get(&format!("/runs/{run}/tasks/A/events?limit=5000"))
        .text()
        .lines()
        .map(|x| serde_json::from_str(x).unwrap())
        .collect();
    let at = |f: &dyn Fn(&Value) -> bool| events.iter().position(f).expect("event");
    let input = at(&|e| e["type"] == "input" && e["data"]["id"] == id.as_str());
    assert_eq!(events[input]["data"]["text"], "operator note: mention bananas");
    let first_result =
        at(&|e| e["type"] == "tool_result" && e["data"]["output"].as_str().unwrap_or("").contains("TOOL1"));
    let second_call = at(&|e| e["type"] == "tool_call" && e["data"]["args"].to_string().contains("TOOL2"));
    assert!(first_result < input && input < second_call, "{first_result} {input} {second_call}");
    // The task's view lists the steer and where it stands.
    let task = api.get(&format!("/runs/{run}/tasks/A")).json();
    let steers = task["steers"].as_array().unwrap();
    assert_eq!(steers.len(), 1, "{task}");
    assert_eq!((steers[0]["id"].as_str(), steers[0]["state"].as_str()), (Some(id.as_str()), Some("taken")));
}

#[test]
fn interrupt_true_starts_a_new_turn_in_the_same_process() {
    let Some(l) = Live::new() else { return };
    let mut sup = l.start("Run two slow steps. [anthropic:twotools:4000]");
    let api = ApiProc::start(&l.b.home(), &[]);
    let run = l.b.run_id();
    l.wait_first_tool();
    let r =
        l.post(&api, &format!("/runs/{run}/tasks/A/steer"), &json!({"msg":"stop that; just say hi","interrupt":true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["delivery"], "live");
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(sup.wait_exit(T), 0, "{}", l.b.supervisor_log());
    // Two turns (the cut one and the message's), one process: one dispatch, one exit marker.
    assert_eq!(l.results(), 2, "{:?}", l.log().iter().filter(|x| x["type"] == "result").collect::<Vec<_>>());
    let markers = l.log().iter().filter(|x| x["harness"] == "exit").count();
    assert_eq!(markers, 1, "one wrapper process");
    let leased = l.b.journal().iter().filter(|r| r["kind"] == "task" && r["state"] == "leased").count();
    assert_eq!(leased, 1);
    assert_eq!(l.steer_outcomes(&id), ["queued", "delivered", "taken"]);
    // The first turn ended cut (`aborted_tools`, after its running tool finished); the next turn's
    // first request carries the message.
    let results: Vec<Value> = l.log().into_iter().filter(|x| x["type"] == "result").collect();
    assert_eq!(results[0]["terminal_reason"], "aborted_tools", "{:?}", results[0]);
    assert!(
        l.s.requests_to("/v1/messages")
            .iter()
            .any(|q| q.body["messages"].to_string().contains("stop that; just say hi")),
        "the message reached the model"
    );
}

#[test]
fn interrupt_ends_the_turn_with_the_session_whole_and_a_steer_resumes_it() {
    let Some(l) = Live::new() else { return };
    let mut sup = l.start("Run two slow steps. [anthropic:twotools:4000] first-prompt-marker");
    let api = ApiProc::start(&l.b.home(), &[]);
    let run = l.b.run_id();
    l.wait_first_tool();
    let r = l.post(&api, &format!("/runs/{run}/tasks/A/interrupt"), &json!({"by":"tester"}));
    assert_eq!(r.status, 200, "{}", r.text());
    l.b.wait_state("A", "halted", T);
    let halted = l.b.journal().into_iter().rfind(|r| r["kind"] == "task" && r["state"] == "halted").unwrap();
    assert_eq!(halted["detail"], "interrupted by tester", "{halted}");
    let session = halted["session_id"].as_str().expect("the session is kept").to_string();
    // Not running any more: interrupt is refused (409, on the record).
    let r = l.post(&api, &format!("/runs/{run}/tasks/A/interrupt"), &json!({}));
    assert_eq!(r.status, 409, "{}", r.text());
    // A steer resumes the same session: the model sees the earlier turn.
    let r = l.post(&api, &format!("/runs/{run}/tasks/A/steer"), &json!({"msg":"now just say hi. resume-marker"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["delivery"], "resume");
    assert_eq!(sup.wait_exit(T), 0, "{}", l.b.supervisor_log());
    l.b.wait_state("A", "committed", T);
    let resumed =
        l.s.requests_to("/v1/messages")
            .into_iter()
            .find(|q| q.body["messages"].to_string().contains("resume-marker"))
            .expect("the resumed turn's request");
    assert!(resumed.body["messages"].to_string().contains("first-prompt-marker"), "the earlier turn is in the session");
    let inits: Vec<Value> = l.log().into_iter().filter(|x| x["type"] == "system" && x["subtype"] == "init").collect();
    assert!(inits.iter().all(|i| i["session_id"] == session.as_str()), "{inits:?}");
    let interrupts = l.b.controls("interrupt");
    let outcomes: Vec<&str> = interrupts.iter().map(|c| c["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["accepted", "refused"]);
}

#[test]
fn kill_of_a_live_task_leaves_no_process_and_no_channel() {
    let Some(l) = Live::new() else { return };
    let mut sup = l.start("Run two slow steps. [anthropic:twotools:6000]");
    let api = ApiProc::start(&l.b.home(), &[]);
    let run = l.b.run_id();
    l.wait_first_tool();
    let pgid = control(&l.b.sock(), &json!({"verb":"status"}))["tasks"]["A"]["pgid"].as_i64().unwrap() as i32;
    let r = l.post(&api, &format!("/runs/{run}/tasks/A/kill"), &json!({"by":"tester"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["state"], "halted");
    assert!(
        !harness::supervisor::kill::group_alive(pgid),
        "left: {:?}",
        harness::supervisor::kill::group_members(pgid)
    );
    let home = format!("HOME={}", l.env.home.display());
    let exe = bin().canonicalize().unwrap();
    let left: Vec<u32> = processes_with_env(&home)
        .into_iter()
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).map_or(true, |e| e != exe))
        .collect();
    assert_eq!(left, Vec::<u32>::new(), "claude processes left after the kill");
    assert!(!l.b.repo().join("runstate/live.live/A.in").exists(), "the channel's FIFO is removed");
    assert_eq!(l.b.view()["tasks"]["A"]["detail"], "killed by tester");
    // The interrupt verb has nothing to interrupt now.
    assert_eq!(l.post(&api, &format!("/runs/{run}/tasks/A/interrupt"), &json!({})).status, 409);
    control(&l.b.sock(), &json!({"verb":"stop"}));
    sup.wait_exit(T);
}

/// `harness session start … --foreground` with the real engines; the run's log once it is known.
fn start_session(l: &Live, args: &[&str]) -> Proc {
    let mut cmd = l.b.harness("success");
    cmd.envs(l.env.vars())
        .args(["session", "start", "--cwd"])
        .arg(l.b.repo())
        .args(args)
        .arg("--foreground")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(l.b.dir.path().join("supervisor.log")).unwrap());
    let p = Proc { child: cmd.spawn().unwrap() };
    wait_for(T, || (l.b.try_run_id().is_some() && harness::control::is_live(&l.b.sock())).then_some(()))
        .unwrap_or_else(|| panic!("the session never started: {}", l.b.supervisor_log()));
    p
}

fn session_log(l: &Live, api: &ApiProc) -> Vec<Value> {
    let t = api.get(&format!("/runs/{}/tasks/session", l.b.run_id())).json();
    json_lines(std::path::Path::new(t["logfile"].as_str().unwrap()))
}

#[test]
fn a_session_stays_open_between_turns_and_commits_when_it_ends() {
    let Some(l) = Live::new() else { return };
    let mut sup = start_session(&l, &["--prompt", "Say hi. session-first-marker", "--idle", "10m"]);
    let api = ApiProc::start(&l.b.home(), &[]);
    let run = l.b.run_id();
    let results = |api: &ApiProc| session_log(&l, api).iter().filter(|x| x["type"] == "result").count();
    wait_for(T, || (results(&api) == 1).then_some(())).expect("the first turn");
    std::thread::sleep(Duration::from_millis(500));
    // The turn is over but the session is not: claude still runs, no exit marker.
    assert!(!session_log(&l, &api).iter().any(|x| x["harness"] == "exit"), "the session stays open");
    assert_eq!(l.b.state("session").as_deref(), Some("leased"));
    let r =
        l.post(&api, &format!("/runs/{run}/tasks/session/steer"), &json!({"msg":"And again. session-second-marker"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["delivery"], "live", "{}", r.text());
    wait_for(T, || (results(&api) == 2).then_some(())).expect("the second turn");
    let (code, out, err) = cli(&l.b.home(), &["session", "end", &run]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(sup.wait_exit(T), 0, "{}", l.b.supervisor_log());
    l.b.wait_state("session", "committed", T);
    let log = session_log(&l, &api);
    assert_eq!(log.iter().filter(|x| x["harness"] == "exit").count(), 1, "one claude process");
    let leased = l.b.journal().iter().filter(|r| r["kind"] == "task" && r["state"] == "leased").count();
    assert_eq!(leased, 1);
    // One conversation: the second turn's request carries the first.
    let second =
        l.s.requests_to("/v1/messages")
            .into_iter()
            .find(|q| q.body["messages"].to_string().contains("session-second-marker"))
            .expect("the second turn's request");
    assert!(second.body["messages"].to_string().contains("session-first-marker"));
    let ends = l.b.controls("end");
    assert_eq!(ends.iter().map(|c| c["outcome"].as_str().unwrap()).collect::<Vec<_>>(), ["accepted"]);
}

#[test]
fn a_session_without_a_prompt_waits_for_its_first_message_and_ends_when_idle() {
    let Some(l) = Live::new() else { return };
    let mut sup = start_session(&l, &["--idle", "3s"]);
    let api = ApiProc::start(&l.b.home(), &[]);
    let run = l.b.run_id();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(l.s.requests_to("/v1/messages").is_empty(), "no turn before the first message");
    let r = l.post(&api, &format!("/runs/{run}/tasks/session/steer"), &json!({"msg":"Say hi. idle-marker"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["delivery"], "live");
    // One turn, then three idle seconds: the session ends by itself and commits.
    assert_eq!(sup.wait_exit(T), 0, "{}", l.b.supervisor_log());
    l.b.wait_state("session", "committed", T);
    let results = session_log(&l, &api).iter().filter(|x| x["type"] == "result").count();
    assert_eq!(results, 1);
    assert!(l.s.requests_to("/v1/messages").iter().any(|q| q.body["messages"].to_string().contains("idle-marker")));
}
