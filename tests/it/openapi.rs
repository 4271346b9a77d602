//! The API against `spec/openapi.yaml`: every route is exercised on a real server; each answer's
//! status must be documented for that route and method, and each JSON body must validate against
//! the documented schema (events lines against `spec/events.schema.json`).

use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

pub(crate) struct Spec {
    doc: Value,
    events: jsonschema::Validator,
    /// (method, template) pairs seen with a 2xx answer.
    covered: BTreeSet<(String, String)>,
}

/// Routes only a fleet API answers 2xx (`fleet::` walks them; a home's own API answers 404).
const FLEET_ONLY: &[(&str, &str)] = &[("GET", "/hosts")];

impl Spec {
    pub(crate) fn load() -> Spec {
        let text = std::fs::read_to_string(repo_dir().join("spec/openapi.yaml")).unwrap();
        let doc: Value = serde_yaml::from_str(&text).expect("openapi.yaml parses");
        assert_eq!(doc["openapi"], "3.1.0");
        Spec { doc, events: schema("events.schema.json"), covered: BTreeSet::new() }
    }

    fn deref<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let ptr = r.trim_start_matches('#');
                self.doc.pointer(ptr).unwrap_or_else(|| panic!("dangling $ref {r}"))
            }
            None => v,
        }
    }

    fn validator(&self, schema: &Value) -> jsonschema::Validator {
        let mut doc = self.doc.clone();
        doc["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
        doc["$defs"] = json!({"target": schema});
        doc["$ref"] = json!("#/$defs/target");
        jsonschema::options().build(&doc).expect("spec schema compiles")
    }

    /// Checks one real answer against the spec.
    pub(crate) fn check(&mut self, method: &str, template: &str, r: &Resp) {
        let op = &self.doc["paths"][template][method.to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in openapi.yaml");
        let documented = &op["responses"][r.status.to_string()];
        assert!(
            documented.is_object(),
            "{method} {template} answered {} which openapi.yaml does not document: {}",
            r.status,
            r.text()
        );
        let documented = self.deref(documented).clone();
        if (200..300).contains(&r.status) {
            self.covered.insert((method.to_string(), template.to_string()));
        }
        let ct = r.header("content-type").unwrap_or("").to_string();
        let base = ct.split(';').next().unwrap_or("").trim().to_string();
        if base != "application/json" && documented["content"].get(&base).is_some() {
            // Another documented type (a diff's text/x-diff): what it is, not its shape, is checked.
            return;
        }
        if let Some(schema) = documented["content"]["application/json"].get("schema") {
            assert_eq!(ct, "application/json", "{method} {template} {}", r.status);
            let v = r.json();
            let validator = self.validator(schema);
            let errs: Vec<String> =
                validator.iter_errors(&v).map(|e| format!("{e} at {}", e.instance_path())).collect();
            assert!(
                errs.is_empty(),
                "{method} {template} {}: body violates the spec:\n{}\n{v}",
                r.status,
                errs.join("\n")
            );
        } else if documented["content"].get("application/x-ndjson").is_some() {
            assert_eq!(ct, "application/x-ndjson");
            for line in r.text().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                if template.ends_with("/events") {
                    assert_valid(&self.events, &v, "events line");
                } else {
                    // The journal's pages: watch/v1 lines.
                    assert_eq!(v["v"], "watch/v1", "{v}");
                    assert!(v["line"].as_u64().is_some(), "{v}");
                }
            }
        }
    }
}

#[test]
fn every_route_answers_as_openapi_yaml_says() {
    let mut spec = Spec::load();
    // Durable routes over the fixture runs.
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let fin = run_id_of(&ids, "finished");
    let mid = run_id_of(&ids, "midwave");
    let cases: Vec<(&str, &str, String)> = vec![
        ("GET", "/runs", "/runs".into()),
        ("GET", "/runs/{runId}", format!("/runs/{fin}")),
        ("GET", "/runs/{runId}", format!("/runs/{mid}")),
        ("GET", "/runs/{runId}", "/runs/0123456789ab--nope".into()),
        ("GET", "/runs/{runId}", "/runs/..%2Fx".into()),
        ("GET", "/runs/{runId}/tasks/{tid}", format!("/runs/{mid}/tasks/B1")),
        ("GET", "/runs/{runId}/tasks/{tid}", format!("/runs/{fin}/tasks/T3")),
        ("GET", "/runs/{runId}/tasks/{tid}", format!("/runs/{fin}/tasks/ZZ")),
        ("GET", "/runs/{runId}/tasks/{tid}/events", format!("/runs/{fin}/tasks/T1/events?limit=5")),
        ("GET", "/runs/{runId}/tasks/{tid}/events", format!("/runs/{fin}/tasks/T1/events?after=nope")),
        ("GET", "/runs/{runId}/tasks/{tid}/stream", format!("/runs/{fin}/tasks/T1/stream")),
        ("GET", "/runs/{runId}/journal", format!("/runs/{fin}/journal?limit=3")),
        ("GET", "/runs/{runId}/journal", format!("/runs/{fin}/journal?after=nope")),
    ];
    for (m, t, p) in &cases {
        let r = http(api.port, m, p, &[], None);
        spec.check(m, t, &r);
    }
    let r = http(api.port, "POST", "/runs", &[], Some(b"{}"));
    spec.check("GET", "/runs", &r); // 405 is documented on the route
    let r = http(api.port, "GET", "/runs", &[("Host", "evil.example")], None);
    spec.check("GET", "/runs", &r);
    let r = http(api.port, "POST", &format!("/runs/{mid}/pause"), &[], None);
    spec.check("POST", "/runs/{runId}/pause", &r);
    drop(api);

    // Live routes over a supervised run.
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"oa","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"},{"id":"R","wave":1,"adapter":"codex","prompt":"y"},
        {"id":"L","wave":1,"adapter":"claude","prompt":"z","live":true,"approvals":"ask"}]}"#;
    let _sup = b.start_supervised(plan, "hang", &[]);
    wait_for(Duration::from_secs(30), || {
        (b.try_run_id().is_some() && harness::control::is_live(&b.sock()) && b.records().len() >= 3).then_some(())
    })
    .expect("live run");
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    // What a task changed, and its gate and review: the patch is text/x-diff, the rest JSON.
    for (t, p) in [
        ("/runs/{runId}/tasks/{tid}/diff", format!("/runs/{run}/tasks/A/diff")),
        ("/runs/{runId}/tasks/{tid}/diff", format!("/runs/{run}/tasks/A/diff?stat=1")),
        ("/runs/{runId}/tasks/{tid}/diff", format!("/runs/{run}/tasks/A/diff?stat=2")),
        ("/runs/{runId}/tasks/{tid}/diff", format!("/runs/{run}/tasks/ZZ/diff")),
        ("/runs/{runId}/diff", format!("/runs/{run}/diff")),
        ("/runs/{runId}/diff", format!("/runs/{run}/diff?stat=1")),
        ("/runs/{runId}/tasks/{tid}/gate", format!("/runs/{run}/tasks/A/gate")),
        ("/runs/{runId}/tasks/{tid}/review", format!("/runs/{run}/tasks/R/review")),
        ("/runs/{runId}/tasks/{tid}/review", format!("/runs/{run}/tasks/ZZ/review")),
    ] {
        let r = api.get(&p);
        spec.check("GET", t, &r);
        if r.status == 200 && !p.contains("stat=1") && p.contains("diff") {
            assert!(r.header("content-type").unwrap().starts_with("text/x-diff"), "{p}");
        }
    }
    let j = |body: &str| -> (Vec<(&'static str, &'static str)>, Vec<u8>) {
        (vec![("Content-Type", "application/json")], body.as_bytes().to_vec())
    };
    let posts: Vec<(&str, String, &str)> = vec![
        ("/runs/{runId}/pause", format!("/runs/{run}/pause"), r#"{"by":"spec"}"#),
        ("/runs/{runId}/resume", format!("/runs/{run}/resume"), "{}"),
        ("/runs/{runId}/budget", format!("/runs/{run}/budget"), r#"{"usd":2.5,"by":"spec"}"#),
        ("/runs/{runId}/budget", format!("/runs/{run}/budget"), r#"{"usd":1,"task":"A"}"#),
        ("/runs/{runId}/budget", format!("/runs/{run}/budget"), r#"{"usd":0}"#),
        ("/runs/{runId}/budget", format!("/runs/{run}/budget"), r#"{"usd":1,"task":"Q"}"#),
        ("/runs/{runId}/tasks/{tid}/steer", format!("/runs/{run}/tasks/A/steer"), r#"{"msg":"go"}"#),
        ("/runs/{runId}/tasks/{tid}/steer", format!("/runs/{run}/tasks/R/steer"), r#"{"msg":"go"}"#),
        ("/runs/{runId}/tasks/{tid}/steer", format!("/runs/{run}/tasks/A/steer"), r#"{"nope":1}"#),
        ("/runs/{runId}/tasks/{tid}/steer", format!("/runs/{run}/tasks/Q/steer"), r#"{"msg":"go"}"#),
        ("/runs/{runId}/tasks/{tid}/kill", format!("/runs/{run}/tasks/R/kill"), "{}"),
        ("/runs/{runId}/tasks/{tid}/kill", format!("/runs/{run}/tasks/R/kill"), "{}"),
        // R is halted now: retried (it runs again), killed, then skipped; A runs, so it is not retried.
        ("/runs/{runId}/tasks/{tid}/retry", format!("/runs/{run}/tasks/R/retry"), r#"{"by":"spec"}"#),
        ("/runs/{runId}/tasks/{tid}/kill", format!("/runs/{run}/tasks/R/kill"), "{}"),
        ("/runs/{runId}/tasks/{tid}/skip", format!("/runs/{run}/tasks/R/skip"), "{}"),
        ("/runs/{runId}/tasks/{tid}/skip", format!("/runs/{run}/tasks/R/skip"), r#"{"reason":"spec","by":"spec"}"#),
        ("/runs/{runId}/tasks/{tid}/retry", format!("/runs/{run}/tasks/A/retry"), "{}"),
        // A live task's turn (the fake engine hangs on it) is interrupted; a batch task refuses.
        ("/runs/{runId}/tasks/{tid}/interrupt", format!("/runs/{run}/tasks/L/interrupt"), r#"{"by":"spec"}"#),
        ("/runs/{runId}/tasks/{tid}/interrupt", format!("/runs/{run}/tasks/A/interrupt"), "{}"),
    ];
    for (t, p, body) in &posts {
        let (h, bytes) = j(body);
        let r = http(api.port, "POST", p, &h, Some(&bytes));
        spec.check("POST", t, &r);
    }
    // Approvals: an ask of L's running turn (as the MCP permission tool makes it), listed, decided.
    let sock = b.sock();
    let asker = std::thread::spawn(move || {
        control(&sock, &serde_json::json!({"verb":"ask","task":"L","tool":"Bash","input":{"command":"make"}}))
    });
    let pending = wait_for(Duration::from_secs(10), || {
        let r = api.get(&format!("/runs/{run}/approvals?state=pending"));
        r.json()["approvals"].as_array().and_then(|a| a.first().cloned()).map(|a| (r, a))
    });
    let (r, a) = pending.expect("a pending approval");
    spec.check("GET", "/runs/{runId}/approvals", &r);
    let aid = a["id"].as_str().unwrap().to_string();
    for (body, state) in
        [(r#"{"decision":"deny","message":"not now","by":"spec"}"#, 200), (r#"{"decision":"allow"}"#, 409)]
    {
        let (h, bytes) = j(body);
        let r = http(api.port, "POST", &format!("/runs/{run}/tasks/L/approvals/{aid}"), &h, Some(&bytes));
        assert_eq!(r.status, state, "{}", r.text());
        spec.check("POST", "/runs/{runId}/tasks/{tid}/approvals/{aid}", &r);
    }
    let answered = asker.join().unwrap();
    assert_eq!(answered["decision"], serde_json::json!({"behavior":"deny","message":"not now"}));
    let r = api.get(&format!("/runs/{run}/approvals?state=bogus"));
    assert_eq!(r.status, 400);
    spec.check("GET", "/runs/{runId}/approvals", &r);
    let r =
        http(api.port, "POST", &format!("/runs/{run}/tasks/A/steer"), &[("Content-Type", "text/plain")], Some(b"x"));
    spec.check("POST", "/runs/{runId}/tasks/{tid}/steer", &r);
    assert_eq!(r.status, 415);
    let big = vec![b'x'; 70_000];
    let r = http(
        api.port,
        "POST",
        &format!("/runs/{run}/tasks/A/kill"),
        &[("Content-Type", "application/json")],
        Some(&big),
    );
    spec.check("POST", "/runs/{runId}/tasks/{tid}/kill", &r);
    assert_eq!(r.status, 413);
    // The stream: status and content type (its body is SSE text).
    let c = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    assert_eq!(c.status, 200);
    spec.covered.insert(("GET".into(), "/runs/{runId}/tasks/{tid}/stream".into()));
    drop(c);
    let c = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/feed"), &[]);
    assert_eq!(c.status, 200);
    assert!(c.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    spec.covered.insert(("GET".into(), "/runs/{runId}/tasks/{tid}/feed".into()));
    drop(c);
    let c = SseConn::open(api.port, "/watch?since=now", &[]);
    assert_eq!(c.status, 200);
    assert!(c.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    spec.covered.insert(("GET".into(), "/watch".into()));
    drop(c);
    let r = api.get("/watch?since=later");
    spec.check("GET", "/watch", &r);
    assert_eq!(r.status, 400);

    // A fleet's route on a home's own API: the documented 404.
    let r = api.get("/hosts");
    assert_eq!(r.status, 404);
    spec.check("GET", "/hosts", &r);

    // Every route of the spec answered 2xx at least once: the spec and the server agree on the routes.
    let mut all = BTreeSet::new();
    for (path, ops) in spec.doc["paths"].as_object().unwrap() {
        for m in ops.as_object().unwrap().keys() {
            if !FLEET_ONLY.contains(&(m.to_uppercase().as_str(), path.as_str())) {
                all.insert((m.to_uppercase(), path.clone()));
            }
        }
    }
    let missing: Vec<_> = all.difference(&spec.covered).collect();
    assert!(missing.is_empty(), "routes never answered 2xx: {missing:?}");
}

/// The view types against their schemas: each type, fully populated (every option set, every list
/// non-empty), writes exactly the properties its schema names, nested objects and array items
/// included — a field missing from the spec, or a property no type writes, fails here.
pub(crate) mod types {
    use super::Spec;
    use harness::ids::{RunId, Slug, TaskId};
    use harness::views::*;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// Properties whose schema leaves their shape to another spec: not looked into.
    const OPAQUE: &[&str] = &["binding", "input", "record"];

    impl Spec {
        /// A schema with its `$ref` followed.
        fn resolve(&self, schema: &Value) -> Value {
            let mut s = schema.clone();
            while let Some(r) = s.get("$ref").and_then(Value::as_str) {
                s = self.doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling $ref {r}")).clone();
            }
            s
        }

        /// The properties `schema` names (through `$ref`, `allOf` and the non-null `anyOf` arms; a
        /// later `allOf` arm wins), each with its schema, and whether it names any.
        fn properties(&self, schema: &Value) -> (BTreeMap<String, Value>, bool) {
            let s = self.resolve(schema);
            let mut out = BTreeMap::new();
            let mut named = false;
            for arm in s["allOf"].as_array().into_iter().chain(s["anyOf"].as_array()).flatten() {
                let (p, n) = self.properties(arm);
                out.extend(p);
                named |= n;
            }
            let extra = s.get("additionalProperties").cloned().unwrap_or(json!({}));
            for k in s["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                out.entry(k.to_string()).or_insert_with(|| extra.clone());
                named = true;
            }
            for (k, p) in s["properties"].as_object().into_iter().flatten() {
                out.insert(k.clone(), p.clone());
                named = true;
            }
            (out, named)
        }

        /// The items schema of an array schema (through `$ref`), if it names one.
        fn items(&self, schema: &Value) -> Option<Value> {
            self.resolve(schema).get("items").cloned()
        }

        /// What differs between `v` (a view as written) and `schema`, at `path`.
        fn differences(&self, v: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
            match v {
                Value::Null => out.push(format!("{path}: null (the instance is not fully populated)")),
                Value::Object(m) => {
                    let (props, named) = self.properties(schema);
                    if !named {
                        out.push(format!("{path}: an object whose schema names no properties"));
                        return;
                    }
                    for (k, x) in m {
                        let at = format!("{path}.{k}");
                        match props.get(k) {
                            None => out.push(format!("{at}: written, and not in the schema")),
                            Some(_) if OPAQUE.contains(&k.as_str()) => {}
                            Some(p) => self.differences(x, p, &at, out),
                        }
                    }
                    for k in props.keys().filter(|k| !m.contains_key(*k)) {
                        out.push(format!("{path}.{k}: in the schema, and never written"));
                    }
                }
                Value::Array(a) => match self.items(schema) {
                    None => out.push(format!("{path}: an array whose schema names no items")),
                    Some(_) if a.is_empty() => out.push(format!("{path}: empty (the instance is not fully populated)")),
                    Some(items) => a.iter().for_each(|x| self.differences(x, &items, &format!("{path}[]"), out)),
                },
                _ => {}
            }
        }
    }

    pub(crate) fn usage() -> Usage {
        Usage {
            cost_usd: Some(0.25),
            input_tokens: Some(10),
            output_tokens: Some(20),
            cache_read_tokens: Some(30),
            cache_write_tokens: Some(40),
            turns: 2,
            cost: Cost::Engine,
        }
    }

    fn bad_line() -> BadLine {
        BadLine { line: 7, reason: "not a record".into() }
    }

    fn run_id() -> RunId {
        RunId::parse("0123456789ab--payments").unwrap()
    }

    fn task() -> TaskId {
        TaskId::parse("B1").unwrap()
    }

    pub(crate) fn summary<J>(journal: J) -> RunSummary<J> {
        RunSummary {
            run_id: run_id(),
            slug: Slug::parse("payments").unwrap(),
            repo_root: "/r".into(),
            project: "p".into(),
            repo: "r".into(),
            branch: Some("main".into()),
            worktree: "/r".into(),
            plane: Plane::Standalone,
            created: "2026-11-29T14:00:00.000Z".into(),
            base_branch: Some("main".into()),
            status: RunStatus::Paused,
            paused: true,
            pause_reason: Some(PauseReason::Budget),
            pause_detail: Some("spent".into()),
            resume_at: Some("2026-11-29T15:00:00.000Z".into()),
            budget_usd: Some(5.0),
            attention_marks: 1,
            stalled: true,
            stalled_since: Some("2026-11-29T14:02:00.000Z".into()),
            started_at: Some("2026-11-29T14:00:00.000Z".into()),
            finished_at: Some("2026-11-29T14:30:00.000Z".into()),
            pending_approvals: 1,
            wave: Some(2),
            waves: Some(3),
            tasks: 5,
            counts: Counts {
                leased: 1,
                implemented: 0,
                gated: 0,
                reviewed: 0,
                committed: 2,
                halted: 1,
                skipped: 1,
                pending: 1,
            },
            updated: Some("2026-11-29T14:05:00.000Z".into()),
            journal,
            usage: usage(),
            base_slug: Some(Slug::parse("payments").unwrap()),
            blocked_by: vec![Blocker {
                task: task(),
                state: TaskState::Halted,
                detail: Some("engine failed: exit 1".into()),
                since: "2026-11-29T14:04:00.000Z".into(),
            }],
            fails_at: Some("2026-11-29T14:34:00.000Z".into()),
        }
    }

    pub(crate) fn health() -> JournalHealth {
        JournalHealth { records: 20, bad_lines: 1, torn_tail: true }
    }

    fn facts() -> TaskFacts {
        TaskFacts {
            state: TaskState::Leased,
            rc: Some(0),
            detail: Some("d".into()),
            sha: Some("aa11".into()),
            no_changes: false,
            session_id: Some("s".into()),
            attempts: 1,
            updated: Some("2026-11-29T14:03:07.000Z".into()),
            worktree: Some("/w/B1".into()),
            halt_reason: Some(HaltReason::Gate),
            stalled: true,
            stalled_since: Some("2026-11-29T14:02:00.000Z".into()),
            commit: Some(commit()),
        }
    }

    fn commit() -> CommitView {
        CommitView {
            sha: "aa11".into(),
            subject: Some("B1: add b".into()),
            integrated: true,
            files: Some(vec![file()]),
        }
    }

    fn file() -> FileChange {
        FileChange {
            path: "b.txt".into(),
            old_path: Some("a.txt".into()),
            status: FileStatus::Renamed,
            added: Some(3),
            removed: Some(1),
        }
    }

    fn attention() -> AttentionView {
        AttentionView {
            attention: AttentionKind::Stalled,
            task: task(),
            idle_s: Some(300),
            detail: Some("no output".into()),
            ts: "2026-11-29T14:05:09.000Z".into(),
            line: 21,
        }
    }

    pub(crate) fn run_detail() -> RunDetail {
        let journal =
            JournalDetail { health: health(), bad_line_list: vec![bad_line()], torn_tail_line: Some(bad_line()) };
        let task_view = TaskView {
            id: task(),
            task: Some(task()),
            pending_approvals: 1,
            facts: facts(),
            adapter: Adapter::Claude,
            review: true,
            gate: Some("true".into()),
            usage: Some(usage()),
            budget_usd: Some(1.5),
            idle_s: Some(Some(2.5)),
            live_state: Some(LiveState::Gating),
        };
        RunDetail {
            run: summary(journal),
            live: true,
            supervisor: Supervisor::Live,
            plan: PlanView { waves: vec![Wave { wave: 2, tasks: vec![task_view] }] },
            unplanned_tasks: vec![UnplannedTask { id: TaskId::parse("Z9").unwrap(), facts: facts() }],
            pending_steers: 1,
            attention: vec![attention()],
            paths: RunPaths { journal: "/j".into(), plan: "/p".into(), liveness: "/l".into() },
            host: Some(host()),
            host_seen: Some("2026-11-29T14:05:09.000Z".into()),
            host_online: Some(true),
            mirror_stopped: Some("the host's journal was replaced under the run id".into()),
        }
    }

    pub(crate) fn task_detail() -> TaskDetail {
        TaskDetail {
            run_id: run_id(),
            task: task(),
            facts: facts(),
            binding: Some(json!({"id": "B1", "wave": 2, "adapter": "claude", "prompt": "x"})),
            live: Some(TaskLive {
                pid: 10,
                pgid: 10,
                alive: true,
                state: LiveState::Gating,
                started_ts: "2026-11-29T14:03:07.000Z".into(),
                runtime_s: Some(12.0),
                idle_s: Some(3.0),
                last_output_ts: Some("2026-11-29T14:03:10.000Z".into()),
            }),
            usage: Some(usage()),
            logfile: "/l/B1.log".into(),
            log_exists: true,
            pending_steers: vec![PendingSteer {
                id: "s-1".into(),
                task: task(),
                msg: "m".into(),
                interrupt: true,
                line: 15,
            }],
            steers: vec![SteerView {
                id: "s-1".into(),
                task: task(),
                msg: Some("m".into()),
                by: "cli".into(),
                state: SteerState::Delivered,
                ts: "2026-11-29T14:05:03.000Z".into(),
                updated: "2026-11-29T14:05:04.000Z".into(),
            }],
            attention: vec![attention()],
            supervised: true,
            history: vec![Attempt {
                n: 1,
                started_at: "2026-11-29T14:03:07.000Z".into(),
                ended_at: Some("2026-11-29T14:04:07.000Z".into()),
                state: TaskState::Halted,
                rc: Some(3),
                reason: Some("engine failed: exit 3".into()),
            }],
            host: Some(host()),
        }
    }

    fn host() -> harness::ids::HostName {
        harness::ids::HostName::parse("build-1").unwrap()
    }

    pub(crate) fn approvals() -> Approvals {
        Approvals {
            run_id: run_id(),
            approvals: vec![ApprovalView {
                id: "a-1".into(),
                task: task(),
                tool: Some("Bash".into()),
                input: Some(json!({"command": "make"})),
                via: Some("mcp".into()),
                state: ApprovalState::Denied,
                by: Some("cli".into()),
                message: Some("no".into()),
                detail: Some("denied".into()),
                ts: "2026-11-29T14:05:06.000Z".into(),
                updated: "2026-11-29T14:05:08.000Z".into(),
            }],
            host: Some(host()),
        }
    }

    /// Each view type, fully populated, with where its schema is in openapi.yaml.
    fn instances() -> Vec<(&'static str, &'static str, Value)> {
        let j = |v: &dyn erased::Ser| v.json();
        let approvals_schema = "/paths/~1runs~1{runId}~1approvals/get/responses/200/content/application~1json/schema";
        vec![
            (
                "RunRow",
                "/components/schemas/RunSummary",
                j(&RunRow {
                    run: summary(health()),
                    live: true,
                    supervisor: Supervisor::Gone,
                    host: Some(host()),
                    host_seen: Some("2026-11-29T14:05:09.000Z".into()),
                    host_online: Some(false),
                    mirror_stopped: Some("the host's journal was replaced under the run id".into()),
                }),
            ),
            (
                "Hosts",
                "/components/schemas/Hosts",
                j(&harness::views::Hosts {
                    hosts: vec![harness::views::HostView {
                        host: host(),
                        seen: "2026-11-29T14:05:09.000Z".into(),
                        online: true,
                        runs: 3,
                        home: Some("0123456789abcdef".into()),
                        machine: Some("ci-box".into()),
                        version: Some("0.1.0".into()),
                    }],
                }),
            ),
            ("RunDetail", "/components/schemas/RunDetail", j(&run_detail())),
            ("TaskDetail", "/components/schemas/TaskDetail", j(&task_detail())),
            ("Approvals", approvals_schema, j(&approvals())),
            ("Usage", "/components/schemas/Usage", j(&usage())),
            ("Answer", "/components/schemas/Error", j(&Answer { ok: false, detail: Some("why".into()) })),
            (
                "SteerBody",
                "/components/schemas/SteerBody",
                j(&SteerBody {
                    msg: "m".into(),
                    comments: vec![ReviewComment {
                        path: "src/a.rs".into(),
                        line: Some(12),
                        body: "off by one".into(),
                    }],
                    interrupt: true,
                    by: "cli".into(),
                }),
            ),
            ("VerbBody", "/components/schemas/VerbBody", j(&VerbBody { by: "cli".into() })),
            (
                "DiffStat",
                "/components/schemas/DiffStat",
                j(&DiffStat {
                    run_id: run_detail().run.run_id,
                    task: Some(task()),
                    of: "commit".into(),
                    commits: vec!["aa11".into()],
                    files: vec![file()],
                    added: 3,
                    removed: 1,
                }),
            ),
            (
                "GateView",
                "/components/schemas/GateView",
                j(&GateView {
                    run_id: run_detail().run.run_id,
                    task: task(),
                    gate: Some("make test".into()),
                    state: StepState::Failed,
                    rc: Some(2),
                    detail: Some("gate failed (exit 2): make test".into()),
                    log: "/r/runstate/s.logs/B1.gate.log".into(),
                    output_tail: "FAIL: 2 tests failed\n".into(),
                }),
            ),
            (
                "ReviewView",
                "/components/schemas/ReviewView",
                j(&ReviewView {
                    run_id: run_detail().run.run_id,
                    task: task(),
                    review: true,
                    state: StepState::Failed,
                    rc: Some(0),
                    verdict: Some("REJECT: tests are missing".into()),
                    reasoning: Some("REJECT: tests are missing\n\nPlease add tests.".into()),
                    log: "/r/runstate/s.logs/B1.review.log".into(),
                }),
            ),
            (
                "StreamEnd",
                "/components/schemas/StreamEnd",
                j(&StreamEnd {
                    run_id: run_detail().run.run_id,
                    task: task(),
                    reason: EndReason::RunOver,
                    state: TaskState::Halted,
                    run_status: RunStatus::Stopped,
                    last_seq: Some("12".into()),
                    detail: "the run stopped; task T is halted".into(),
                }),
            ),
            (
                "BudgetBody",
                "/components/schemas/BudgetBody",
                j(&BudgetBody { usd: 2.0, task: Some(task()), by: "cli".into() }),
            ),
            (
                "DecideBody",
                "/components/schemas/DecideBody",
                j(&DecideBody { decision: Decision::Deny, message: Some("no".into()), by: "cli".into() }),
            ),
        ]
    }

    /// Serialization of any view, for one list of them.
    mod erased {
        pub trait Ser {
            fn json(&self) -> serde_json::Value;
        }
        impl<T: serde::Serialize> Ser for T {
            fn json(&self) -> serde_json::Value {
                serde_json::to_value(self).unwrap()
            }
        }
    }

    #[test]
    fn every_view_type_writes_exactly_its_schema() {
        let spec = Spec::load();
        let mut problems = Vec::new();
        for (name, at, v) in instances() {
            let schema = spec.doc.pointer(at).unwrap_or_else(|| panic!("{at} is not in openapi.yaml")).clone();
            spec.differences(&v, &schema, name, &mut problems);
            // And what the type writes is valid by the schema.
            let errs: Vec<String> = spec.validator(&schema).iter_errors(&v).map(|e| format!("{name}: {e}")).collect();
            problems.extend(errs);
        }
        assert!(problems.is_empty(), "the view types and openapi.yaml disagree:\n  {}", problems.join("\n  "));
    }

    #[test]
    fn the_check_catches_a_renamed_field_and_a_missing_one() {
        let spec = Spec::load();
        let schema = spec.doc.pointer("/components/schemas/TaskDetail").unwrap().clone();
        let mut v = serde_json::to_value(task_detail()).unwrap();
        let logfile = v.as_object_mut().unwrap().remove("logfile").unwrap();
        v["log_file"] = logfile;
        let mut problems = Vec::new();
        spec.differences(&v, &schema, "TaskDetail", &mut problems);
        assert_eq!(
            problems,
            [
                "TaskDetail.log_file: written, and not in the schema",
                "TaskDetail.logfile: in the schema, and never written"
            ]
        );
        v["live"] = Value::Null;
        let mut problems = Vec::new();
        spec.differences(&v, &schema, "TaskDetail", &mut problems);
        assert!(problems.iter().any(|p| p.starts_with("TaskDetail.live: null")), "{problems:?}");
    }

    /// Every value an enum of the spec allows reads as a variant the views know (a CLI must know
    /// every documented value), and every variant the views write is one the spec allows.
    #[test]
    fn every_enum_of_the_spec_is_a_view_enum() {
        fn known<T: Named + PartialEq + std::fmt::Debug>(spec: &Spec, at: &str, written: &[T]) {
            let schema = spec.resolve(spec.doc.pointer(at).unwrap_or_else(|| panic!("{at}")));
            let allowed: Vec<&str> = schema["enum"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            for name in &allowed {
                assert_ne!(T::named(name), T::UNKNOWN, "{at}: {name:?} reads as unknown");
            }
            for w in written {
                assert!(allowed.contains(&w.as_str()), "{at}: {:?} is written and not allowed", w.as_str());
            }
        }
        let spec = Spec::load();
        let s = "/components/schemas";
        use RunStatus as R;
        known(
            &spec,
            &format!("{s}/RunSummary/properties/status"),
            &[R::Pending, R::Running, R::Paused, R::Finished, R::Failed],
        );
        use TaskState as T;
        let tasks = [T::Pending, T::Leased, T::Implemented, T::Gated, T::Reviewed, T::Committed, T::Halted];
        known(&spec, &format!("{s}/TaskState/properties/state"), &tasks);
        use LiveState as L;
        let live = [L::Leased, L::Implemented, L::Gating, L::Gated, L::Reviewing, L::Reviewed, L::Committed, L::Halted];
        known(&spec, &format!("{s}/TaskDetail/allOf/1/properties/live/properties/state"), &live);
        use ApprovalState as A;
        known(&spec, &format!("{s}/Approval/properties/state"), &[A::Pending, A::Allowed, A::Denied, A::Expired]);
        use SteerState as St;
        let steers = [St::Queued, St::Delivered, St::Taken, St::Applied, St::Refused];
        known(&spec, &format!("{s}/TaskDetail/allOf/1/properties/steers/items/properties/state"), &steers);
        known(
            &spec,
            &format!("{s}/Attention/properties/attention"),
            &[AttentionKind::Stalled, AttentionKind::Unstalled],
        );
        use HaltReason as H;
        let halts = [
            H::EngineError,
            H::Gate,
            H::Setup,
            H::ReviewReject,
            H::RateLimited,
            H::Killed,
            H::Interrupted,
            H::Conflict,
            H::Timeout,
            H::Harness,
        ];
        known(&spec, &format!("{s}/TaskState/properties/halt_reason"), &halts);
        use FileStatus as F;
        let statuses = [F::Added, F::Modified, F::Deleted, F::Renamed, F::Copied, F::TypeChanged];
        known(&spec, &format!("{s}/FileChange/properties/status"), &statuses);
        use StepState as S;
        let steps = [S::None, S::Pending, S::Running, S::Passed, S::Failed, S::NotRun];
        known(&spec, &format!("{s}/GateView/properties/state"), &steps);
        known(&spec, &format!("{s}/ReviewView/properties/state"), &steps);
        let ends = [EndReason::TaskOver, EndReason::RunOver, EndReason::NotLive];
        known(&spec, &format!("{s}/StreamEnd/properties/reason"), &ends);
        known(&spec, &format!("{s}/StreamEnd/properties/state"), &[T::Pending, T::Skipped]);
        known(&spec, &format!("{s}/StreamEnd/properties/run_status"), &[R::Blocked, R::Stopped]);
        known(&spec, &format!("{s}/RunSummary/properties/plane"), &[Plane::Standalone, Plane::Dynwf]);
        let adapter = format!(
            "{s}/RunDetail/allOf/1/properties/plan/properties/waves/items/properties/tasks/items/allOf/1/properties/adapter"
        );
        known(&spec, &adapter, &[Adapter::Claude, Adapter::Cursor, Adapter::Codex]);
        known(
            &spec,
            &format!("{s}/Usage/properties/cost"),
            &[Cost::Engine, Cost::TokensOnly, Cost::NotReported, Cost::Mixed],
        );
        known(&spec, &format!("{s}/DecideBody/properties/decision"), &[Decision::Allow, Decision::Deny]);
        // `pause_reason` also allows null (a run that is not paused).
        let schema = &spec.doc.pointer(&format!("{s}/RunSummary/properties/pause_reason/enum")).unwrap();
        let reasons: Vec<&str> = schema.as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(
            reasons,
            [PauseReason::Budget.as_str(), PauseReason::RateLimit.as_str(), PauseReason::Operator.as_str()]
        );
    }
}
