//! The operator decides, not the agent: `decide`, `budget`, `resume`, `retry` and `skip` sent from
//! inside one of the run's tasks — on the control socket or through the API, after `setsid` — are
//! refused (403) and journaled naming the task; so are they sent through the API from inside another
//! live run of the home; the same uid outside the tasks passes.

use crate::common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// What the agent's "Bash tool call" runs: each operator verb on the run's socket, one reply line
/// each (the control protocol needs no client of ours).
const ASK: &str = r#"
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rw")
for req in [{"verb": "resume"}, {"verb": "budget", "usd": 100}, {"verb": "retry", "task": "a"},
            {"verb": "skip", "task": "a", "reason": "done, trust me"},
            {"verb": "decide", "task": "a", "id": "x", "decision": "allow"}, {"verb": "status"}]:
    req["by"] = "agent"
    f.write(json.dumps(req) + "\n"); f.flush()
    print(f.readline().strip())
"#;

/// The connecting process hands the connection to a child and exits (reaped): what the socket's
/// peer credentials name is gone when the verb is judged.
const FORK: &str = r#"
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
if os.fork():
    os._exit(0)
time.sleep(0.3)
f = s.makefile("rw")
f.write(json.dumps({"verb": "resume", "by": "agent"}) + "\n"); f.flush()
print(f.readline().strip(), flush=True)
"#;

#[test]
fn operator_verbs_from_inside_a_task_are_refused_naming_it_and_pass_from_outside() {
    let b = Bench::new();
    let api = ApiProc::start(&b.home(), &[]);
    let d = b.dir.path().join("agent");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("ask.py"), ASK).unwrap();
    std::fs::write(d.join("fork.py"), FORK).unwrap();
    let home = b.home();
    // The agent waits for the operator's pause, then tries to undo it and more: straight on the
    // socket and through the API with the CLI, each from a new session (setsid), as a tool call may.
    let tool = format!(
        "while [ ! -e {d}/go ]; do sleep 0.05; done; \
         setsid -w python3 {d}/ask.py {home}/sock/$HARNESS_RUN.sock > {d}/socket.out 2>&1; \
         HARNESS_HOME={home} setsid -w {bin} resume $HARNESS_RUN --api 127.0.0.1:{port} > {d}/api.out 2>&1; \
         echo rc=$? >> {d}/api.out; \
         sh -c 'setsid python3 {d}/ask.py {home}/sock/$HARNESS_RUN.sock > {d}/orphan.out 2>&1 &'; \
         while [ \"$(cat {d}/orphan.out 2>/dev/null | wc -l)\" -lt 6 ]; do sleep 0.05; done; \
         python3 {d}/fork.py {home}/sock/$HARNESS_RUN.sock > {d}/fork.out 2>&1; \
         while [ \"$(cat {d}/fork.out 2>/dev/null | wc -l)\" -lt 1 ]; do sleep 0.05; done; touch {d}/done",
        d = d.display(),
        home = home.display(),
        bin = bin().display(),
        port = api.port
    );
    let plan = r#"{"v":"plan/v1","slug":"op","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let mut sup = b.start_supervised_with(plan, "success", &[], &[("HARNESS_FAKE_TOOL", tool)]);
    b.wait_state("a", "leased", T);
    let paused = control(&b.sock(), &serde_json::json!({"verb":"pause","by":"operator"}));
    assert_eq!(paused["ok"], true, "{paused}");
    std::fs::write(d.join("go"), "").unwrap();
    wait_for(T, || d.join("done").exists().then_some(()))
        .unwrap_or_else(|| panic!("the agent's tool never finished: {}", b.supervisor_log()));

    let replies: Vec<serde_json::Value> = std::fs::read_to_string(d.join("socket.out"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(replies.len(), 6, "{replies:?}");
    for r in &replies[..5] {
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(r["status"], 403, "{r}");
        let detail = r["detail"].as_str().unwrap();
        assert!(detail.contains("inside the run") && detail.contains("task a's process"), "{detail}");
    }
    assert_eq!(replies[5]["ok"], true, "status is anyone's: {}", replies[5]);
    // A double fork's orphan, reparented to the supervisor (a subreaper): still from inside.
    let orphan = std::fs::read_to_string(d.join("orphan.out")).unwrap();
    let refused = orphan.lines().filter(|l| l.contains("inside the run") && l.contains("a process of the run's"));
    assert_eq!(refused.count(), 5, "{orphan}");
    // A sender gone by the time the verb is judged cannot be placed: refused too.
    let forked = std::fs::read_to_string(d.join("fork.out")).unwrap();
    assert!(forked.contains("\"ok\":false") && forked.contains("cannot be placed"), "{forked}");
    let via_api = std::fs::read_to_string(d.join("api.out")).unwrap();
    assert!(via_api.contains("inside the run") && via_api.contains("task a's process"), "{via_api}");
    assert!(!via_api.contains("rc=0"), "{via_api}");

    // On the record: each refusal, naming the task; nothing was done (still paused, no budget).
    let refused: Vec<serde_json::Value> = b
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "control" && r["outcome"] == "refused")
        .filter(|r| r["detail"].as_str().is_some_and(|d| d.contains("task a's process")))
        .collect();
    let verbs: Vec<&str> = refused.iter().map(|r| r["verb"].as_str().unwrap()).collect();
    for v in ["resume", "budget", "retry", "skip"] {
        assert!(verbs.contains(&v), "{v} refusal journaled: {verbs:?}");
    }
    assert_eq!(verbs.iter().filter(|v| **v == "resume").count(), 2, "socket and API: {verbs:?}");
    assert!(refused.iter().any(|r| r["detail"].as_str().unwrap().contains("decide refused")), "{refused:?}");
    let status = control(&b.sock(), &serde_json::json!({"verb":"status"}));
    assert_eq!(status["paused"], true, "{status}");
    assert!(b.controls("budget").iter().all(|r| r["outcome"] == "refused"));

    // The operator, same uid, outside the tasks: through the API and on the socket.
    let r = http(
        api.port,
        "POST",
        &format!("/runs/{}/budget", b.run_id()),
        &[("Content-Type", "application/json")],
        Some(br#"{"usd":50}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = control(&b.sock(), &serde_json::json!({"verb":"resume","by":"operator"}));
    assert_eq!(resumed["ok"], true, "{resumed}");
    assert_eq!(sup.wait_exit(T), 0, "{}", b.supervisor_log());
    assert_eq!(b.state("a").as_deref(), Some("committed"));
}

/// The runs registered in `b`'s home, by id.
fn run_ids(b: &Bench) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(b.home().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n.ends_with(".json"))
        .map(|n| n.trim_end_matches(".json").to_string())
        .collect();
    ids.sort();
    ids
}

/// The rule covers every run of the home, not only the one the verb names: an agent of run A
/// resuming run B through the API is refused (403, journaled in B naming A and its task), while
/// the operator outside both resumes B.
#[test]
fn an_agent_of_one_run_cannot_send_the_operators_verbs_to_another() {
    let b = Bench::new();
    let api = ApiProc::start(&b.home(), &[]);
    let d = b.dir.path().join("agent");
    std::fs::create_dir(&d).unwrap();
    let home = b.home();
    // Run B: its task hangs; the operator pauses it.
    let plan_b = r#"{"v":"plan/v1","slug":"other","tasks":[{"id":"x","wave":1,"adapter":"claude","prompt":"x [fake-claude:hang]"}]}"#;
    let _sup_b = b.start_supervised(plan_b, "success", &[]);
    let run_b = run_ids(&b).pop().unwrap();
    let sock_b = home.join("sock").join(format!("{run_b}.sock"));
    let journal_b = b.repo().join("runstate/other.jsonl");
    wait_for(T, || (std::fs::read_to_string(&journal_b).unwrap_or_default().contains("\"leased\"")).then_some(()))
        .expect("B's task leased");
    let paused = control(&sock_b, &serde_json::json!({"verb":"pause","by":"operator"}));
    assert_eq!(paused["ok"], true, "{paused}");
    // Run A: its agent's tool call resumes B through the API, from a new session.
    let tool = format!(
        "HARNESS_HOME={home} setsid -w {bin} resume {run_b} --api 127.0.0.1:{port} > {d}/api.out 2>&1; \
         echo rc=$? >> {d}/api.out; touch {d}/done",
        d = d.display(),
        home = home.display(),
        bin = bin().display(),
        port = api.port
    );
    let plan_a = r#"{"v":"plan/v1","slug":"op","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let mut sup_a = b.start_supervised_with(plan_a, "success", &[], &[("HARNESS_FAKE_TOOL", tool)]);
    // (start_supervised waits for the newest id's socket, which may be B's.)
    let run_a = wait_for(T, || run_ids(&b).into_iter().find(|r| *r != run_b)).expect("A registered");
    wait_for(T, || d.join("done").exists().then_some(()))
        .unwrap_or_else(|| panic!("the agent's tool never finished: {}", b.supervisor_log()));
    let via_api = std::fs::read_to_string(d.join("api.out")).unwrap();
    assert!(via_api.contains("403") && via_api.contains("inside another run"), "{via_api}");
    assert!(via_api.contains(&run_a) && via_api.contains("task a's process"), "{via_api}");
    assert!(!via_api.contains("rc=0"), "{via_api}");
    // On B's record, naming A; B is still paused.
    let refused: Vec<serde_json::Value> = json_lines(&journal_b)
        .into_iter()
        .filter(|r| r["kind"] == "control" && r["verb"] == "resume" && r["outcome"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    let detail = refused[0]["detail"].as_str().unwrap();
    assert!(detail.contains(&run_a) && detail.contains("task a's process") && detail.contains("403"), "{detail}");
    let status = control(&sock_b, &serde_json::json!({"verb":"status"}));
    assert_eq!(status["paused"], true, "{status}");
    // A itself went on.
    assert_eq!(sup_a.wait_exit(T), 0, "{}", b.supervisor_log());

    // The operator, outside both runs: B resumes.
    let (code, out, err) = cli(&home, &["resume", &run_b, "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{out}{err}");
    let status = control(&sock_b, &serde_json::json!({"verb":"status"}));
    assert_eq!(status["paused"], false, "{status}");
}
