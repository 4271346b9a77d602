//! The API against `spec/openapi.yaml`: every route is exercised on a real server; each answer's
//! status must be documented for that route and method, and each JSON body must validate against
//! the documented schema (events lines against `spec/events.schema.json`).

use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

struct Spec {
    doc: Value,
    events: jsonschema::Validator,
    /// (method, template) pairs seen with a 2xx answer.
    covered: BTreeSet<(String, String)>,
}

impl Spec {
    fn load() -> Spec {
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
    fn check(&mut self, method: &str, template: &str, r: &Resp) {
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
                assert_valid(&self.events, &serde_json::from_str(line).unwrap(), "events line");
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
    let c = SseConn::open(api.port, "/watch?since=now", &[]);
    assert_eq!(c.status, 200);
    assert!(c.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"));
    spec.covered.insert(("GET".into(), "/watch".into()));
    drop(c);
    let r = api.get("/watch?since=later");
    spec.check("GET", "/watch", &r);
    assert_eq!(r.status, 400);

    // Every route of the spec answered 2xx at least once: the spec and the server agree on the routes.
    let mut all = BTreeSet::new();
    for (path, ops) in spec.doc["paths"].as_object().unwrap() {
        for m in ops.as_object().unwrap().keys() {
            all.insert((m.to_uppercase(), path.clone()));
        }
    }
    let missing: Vec<_> = all.difference(&spec.covered).collect();
    assert!(missing.is_empty(), "routes never answered 2xx: {missing:?}");
}
