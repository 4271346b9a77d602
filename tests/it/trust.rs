//! Only the owner gets in: a client of another uid (switched with `setpriv`) gets 403 on every route
//! and its POSTs change nothing; the same client with the token gets in; the owner needs nothing over
//! TCP or the Unix socket; forged forwarding headers change nothing; a token in both the header and
//! the query: the header wins. Needs root (to switch uid) and curl; skips with a message otherwise.

use crate::common::*;
use std::process::Command;
use std::time::Duration;

const NOBODY: &str = "65534";

/// `curl` run as uid 65534: (status, body).
fn as_nobody(port: u16, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "curl", "-s", "--max-time", "5", "-X", method]);
    c.args(["-o", "-", "-w", "\n%{http_code}"]);
    for h in headers {
        c.args(["-H", h]);
    }
    if method == "POST" {
        let body = if path.ends_with("/steer") { r#"{"msg":"from a stranger"}"# } else { "{}" };
        c.args(["-H", "Content-Type: application/json", "-d", body]);
    }
    let out = c.arg(format!("http://127.0.0.1:{port}{path}")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn can_switch_uid() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let tools = ["setpriv", "curl"].iter().all(|t| Command::new(t).arg("--version").output().is_ok());
    if !(root && tools) {
        eprintln!("SKIPPED: switching uid needs root, setpriv and curl");
    }
    root && tools
}

#[test]
fn another_uid_gets_403_everywhere_and_changes_nothing_the_token_lets_it_in_the_owner_needs_nothing() {
    if !can_switch_uid() {
        return;
    }
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"guarded","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("A", "leased", Duration::from_secs(30));
    let unix = b.dir.path().join("api.sock");
    let api = ApiProc::start(&b.home(), &["--unix", unix.to_str().unwrap()]);
    let run = b.run_id();
    let routes: Vec<(&str, String)> = vec![
        ("GET", "/runs".into()),
        ("GET", format!("/runs/{run}")),
        ("GET", format!("/runs/{run}/tasks/A")),
        ("GET", format!("/runs/{run}/tasks/A/stream")),
        ("GET", format!("/runs/{run}/tasks/A/events")),
        ("POST", format!("/runs/{run}/tasks/A/steer")),
        ("POST", format!("/runs/{run}/tasks/A/kill")),
        ("POST", format!("/runs/{run}/pause")),
        ("POST", format!("/runs/{run}/resume")),
        ("POST", format!("/runs/{run}/budget")),
        ("GET", "/watch".into()),
        ("GET", "/watch?since=now".into()),
    ];
    let journal_before = b.journal().len();
    for (method, path) in &routes {
        let (code, body) = as_nobody(api.port, method, path, &[]);
        assert_eq!(code, 403, "{method} {path}: {body}");
        let detail = serde_json::from_str::<serde_json::Value>(&body).unwrap()["detail"].as_str().unwrap().to_string();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(
            detail,
            format!(
                "connection from uid {NOBODY}: only uid {me} (this API's owner) or a bearer token may use this API"
            )
        );
        // Forged forwarding headers change nothing.
        let forged = ["X-Forwarded-For: 127.0.0.1", "Forwarded: for=127.0.0.1", "X-Real-IP: 127.0.0.1"];
        assert_eq!(as_nobody(api.port, method, path, &forged).0, 403, "{method} {path} with forged headers");
    }
    // Its POSTs changed nothing: no journal record, the task still running, the run not paused.
    assert_eq!(b.journal().len(), journal_before, "a refused POST left a record");
    assert_eq!(b.state("A").as_deref(), Some("leased"));
    let status = control(&b.sock(), &serde_json::json!({"verb":"status"}));
    assert_eq!((status["paused"].as_bool(), status["tasks"]["A"]["running"].as_bool()), (Some(false), Some(true)));

    // With the token (made by the API on its first start, mode 0600) it gets in.
    let token_file = b.home().join("api.token");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_string();
    assert_eq!(token.len(), 64, "256 bits, hex");
    let (code, out, _) = cli(&b.home(), &["token"]);
    assert_eq!((code, out.trim()), (0, token.as_str()));
    let bearer = format!("Authorization: Bearer {token}");
    assert_eq!(as_nobody(api.port, "GET", "/runs", &[&bearer]).0, 200);
    assert_eq!(as_nobody(api.port, "GET", &format!("/runs/{run}/tasks/A/events?token={token}"), &[]).0, 200);
    let (code, body) = as_nobody(api.port, "POST", &format!("/runs/{run}/pause"), &[&bearer]);
    assert_eq!(code, 200, "{body}");
    // A wrong token is 401; with a token in both places the header wins.
    assert_eq!(as_nobody(api.port, "GET", "/runs", &["Authorization: Bearer nope"]).0, 401);
    assert_eq!(as_nobody(api.port, "GET", &format!("/runs?token={token}"), &["Authorization: Bearer nope"]).0, 401);
    assert_eq!(as_nobody(api.port, "GET", "/runs?token=nope", &[&bearer]).0, 200);

    // The owner needs nothing, over TCP and over the Unix socket.
    assert_eq!(api.get("/runs").status, 200);
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket"])
        .arg(&unix)
        .arg("http://localhost/runs")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    drop(sup);
}

#[test]
fn the_cli_prefers_the_apis_unix_socket_and_api_or_the_env_choose_tcp() {
    let home = tempfile::tempdir().unwrap();
    install_fixture_runs(home.path());
    let sock_dir = home.path().join("sock");
    std::fs::create_dir_all(&sock_dir).unwrap();
    let sock = sock_dir.join("api.sock");
    let api = ApiProc::start(home.path(), &["--unix", sock.to_str().unwrap()]);
    // No --api, no HARNESS_API_ADDR: the Unix socket (nothing listens on the default TCP port here).
    let out = harness(home.path()).env_remove("HARNESS_API_ADDR").args(["runs", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 5);
    // HARNESS_API_ADDR chooses TCP (here an address nobody listens on: the CLI says where it tried).
    let out = harness(home.path()).env("HARNESS_API_ADDR", "127.0.0.1:1").args(["runs"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the API at 127.0.0.1:1"));
    // --api chooses TCP too.
    let out = harness(home.path()).args(["runs", "--api", &format!("127.0.0.1:{}", api.port)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // With the API gone, the socket file left behind is reported by its path.
    drop(api);
    let out = harness(home.path()).env_remove("HARNESS_API_ADDR").args(["runs"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot reach the API at unix:{}", sock.display())) || !sock.exists(), "{err}");
}
