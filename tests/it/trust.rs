//! Only the owner gets in: a client of another uid (switched with `setpriv`) gets 403 on every route
//! and its POSTs change nothing; the same client with the token gets in; the owner needs nothing over
//! TCP or the Unix socket; forged forwarding headers change nothing; a token in both the header and
//! the query: the header wins. A client that sends and closes before the API accepts (its socket an
//! orphan, inode 0) is uid unknown: refused, logged, never taken for the owner. Needs root (to switch
//! uid), curl and a python3 uid 65534 may run; skips with a message otherwise.

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

/// A python3 uid 65534 may run (a shim under /root is not one); `None`, said, when there is none.
fn nobody_python() -> Option<&'static str> {
    let found = ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        let mut probe = Command::new("setpriv");
        probe.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", py, "-c", "pass"]);
        probe.output().is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        eprintln!("SKIPPED: needs a python3 that uid {NOBODY} may run");
    }
    found
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
    // With the API killed (SIGKILL: it could not remove its socket file), the file left behind
    // refuses connections and is passed over: the CLI tries TCP, the default address, and says so.
    drop(api);
    assert!(sock.exists(), "a killed API leaves its socket file");
    let out = harness(home.path()).env_remove("HARNESS_API_ADDR").args(["runs"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the API at 127.0.0.1:7878") && !err.contains("api.sock"), "{err}");
    // A socket folder anyone may write to: what answers there could be anyone's. Refused, naming it.
    std::fs::remove_file(&sock).unwrap();
    let planted = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock_dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = harness(home.path()).env_remove("HARNESS_API_ADDR").args(["pause", "0123456789ab--x"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("writable by others") && err.contains("sock"), "{err}");
    std::fs::set_permissions(&sock_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // A socket another uid owns (an API they planted in a home they made first): refused, nothing sent.
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&sock, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        planted.set_nonblocking(true).unwrap();
        let out =
            harness(home.path()).env_remove("HARNESS_API_ADDR").args(["pause", "0123456789ab--x"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("owned by uid 65534") && err.contains("api.sock"), "{err}");
        assert!(planted.accept().is_err(), "nothing connected to the planted socket");
    }
}

/// `harness api --listen 127.0.0.1:0` with its stderr in `log`: the refusals no journal holds are
/// logged there, and the verbs it relays (info); the server's debug lines tell a connection dropped
/// before its request was answered.
fn api_logged(home: &std::path::Path, log: &std::path::Path) -> (Proc, u16) {
    use std::io::BufRead;
    let mut child = harness(home)
        .args(["api", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info,harness::api::server=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("spawn harness api");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok());
    let port = port.unwrap_or_else(|| panic!("unexpected first line from harness api: {line:?}"));
    (Proc { child }, port)
}

/// Every thread of `pid` is stopped (SIGSTOP has taken effect, not just been sent).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|t| {
        let tid: i32 = t.file_name().to_string_lossy().parse().unwrap_or(0);
        matches!(harness::supervisor::kill::stat_fields(tid), Some(('T' | 't', _, _)))
    })
}

/// How many lines of `log` are the guard's 403 for a POST to `path` from a peer of `uid` (a number,
/// or `unknown`) without a token.
fn refused_as(log: &str, path: &str, uid: &str) -> usize {
    let me = nix::unistd::geteuid().as_raw();
    let detail = format!(
        "refused: connection from uid {uid}: only uid {me} (this API's owner) or a bearer token may use this API"
    );
    let fields =
        [format!("PEER_UID={uid}"), "METHOD=\"POST\"".to_string(), format!("PATH={path}"), "STATUS=403".into()];
    log.lines()
        .filter(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.contains(&"WARN") && l.contains(&detail) && fields.iter().all(|f| words.contains(&f.as_str()))
        })
        .count()
}

#[test]
fn a_client_that_closes_before_the_accept_is_uid_unknown_and_refused_never_taken_for_root() {
    if !can_switch_uid() {
        return;
    }
    let Some(python) = nobody_python() else { return };
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"orphans","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("A", "leased", Duration::from_secs(30));
    let log = b.dir.path().join("api.log");
    // The API runs as root, as this test does: an orphaned socket's uid 0 would be its owner's.
    let (api, port) = api_logged(&b.home(), &log);
    let api_pid = api.child.id();
    let run = b.run_id();
    let path = format!("/runs/{run}/pause");
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    let journal_before = b.journal().len();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let refusals = |t: &str| {
        t.lines()
            .filter(|l| l.contains("refused: ") && l.split_whitespace().any(|w| w == format!("PATH={path}")))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    const ROUNDS: usize = 50;
    for i in 0..ROUNDS {
        // The API stopped, the client connects (the kernel completes the handshake into the
        // backlog), sends its whole request and closes: when the API accepts, the client's socket
        // is an orphan (no process holds it): sock_diag reports inode 0 and a uid that proves
        // nothing (0 on older kernels, which is this API's owner here; its creator's on newer ones).
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(api_pid as i32), nix::sys::signal::Signal::SIGSTOP).unwrap();
        wait_for(Duration::from_secs(10), || all_threads_stopped(api_pid).then_some(()))
            .unwrap_or_else(|| panic!("round {i}: the API never stopped"));
        let client = "import socket,sys\n\
                      s=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\n\
                      s.sendall(sys.argv[2].encode())\n\
                      s.close()";
        let out = Command::new("setpriv")
            .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", python, "-c", client])
            .arg(port.to_string())
            .arg(&raw)
            .output()
            .unwrap();
        assert!(out.status.success(), "round {i}: the client failed: {}", String::from_utf8_lossy(&out.stderr));
        assert!(all_threads_stopped(api_pid), "round {i}: the API ran before the client had closed");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(api_pid as i32), nix::sys::signal::Signal::SIGCONT).unwrap();
        // Each round leaves its refusal (or the pause went on) before the next begins.
        let relayed = |t: &str| t.lines().any(|l| l.contains("VERB=\"pause\""));
        wait_for(Duration::from_secs(10), || {
            let t = text();
            (refusals(&t).len() == i + 1 || relayed(&t)).then_some(())
        })
        .unwrap_or_else(|| {
            panic!("round {i}: {} refusals logged, want {}:\n{}", refusals(&text()).len(), i + 1, text())
        });
        assert!(!relayed(&text()), "round {i}: the API took the orphaned socket for its owner's:\n{}", text());
    }
    let all = text();
    let (unknown, nobody) = (refused_as(&all, &path, "unknown"), refused_as(&all, &path, NOBODY));
    eprintln!("{ROUNDS} clients closed before the accept: {unknown} refused as uid unknown, {nobody} as uid {NOBODY}");
    assert_eq!(unknown + nobody, ROUNDS, "every request refused with 403 by the guard:\n{all}");
    assert_eq!(unknown, ROUNDS, "a socket closed before the accept is uid unknown:\n{all}");
    // Nothing was relayed: no verb logged, no record in the journal, the run not paused.
    assert!(!all.lines().any(|l| l.contains("VERB=\"pause\"")), "a pause went on:\n{all}");
    assert_eq!(b.journal().len(), journal_before, "a refused POST left a record");
    assert!(b.controls("pause").is_empty());
    assert_eq!(b.state("A").as_deref(), Some("leased"));
    let status = control(&b.sock(), &serde_json::json!({"verb":"status"}));
    assert_eq!((status["paused"].as_bool(), status["tasks"]["A"]["running"].as_bool()), (Some(false), Some(true)));

    // The same client waiting for its answer is found as uid 65534 (what the log tells apart).
    let (code, body) = as_nobody(port, "POST", &path, &[]);
    assert_eq!(code, 403, "{body}");
    wait_for(Duration::from_secs(5), || (refused_as(&text(), &path, NOBODY) == 1).then_some(()))
        .unwrap_or_else(|| panic!("no refusal of uid {NOBODY}:\n{}", text()));
    assert_eq!(b.journal().len(), journal_before);
    drop(api);
    drop(sup);
}

/// An agent that read the token sends `resume` over TCP and closes before the API can look up who
/// sent it: the sender cannot be placed, so the operator's verb is refused — token or not — and
/// the run stays paused.
#[test]
fn an_agent_that_sends_and_closes_cannot_resume_its_run() {
    use std::io::{BufRead, Write};
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"sendclose","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let _sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("A", "leased", Duration::from_secs(30));
    let paused = control(&b.sock(), &serde_json::json!({"verb":"pause","by":"operator"}));
    assert_eq!(paused["ok"], true, "{paused}");
    let mut child = harness(&b.home())
        .args(["api", "--listen", "127.0.0.1:0"])
        .env("HARNESS_API_TOKEN", "t0ken-read-by-the-agent")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    let api = Proc { child };
    let api_pid = nix::unistd::Pid::from_raw(api.child.id() as i32);
    let raw = format!(
        "POST /runs/{}/resume HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer t0ken-read-by-the-agent\r\nContent-Type: application/json\r\nContent-Length: 14\r\nConnection: close\r\n\r\n{{\"by\":\"agent\"}}",
        b.run_id()
    );
    // Connected (the API accepts it and finds its uid: ours), then, while the API is stopped, it
    // sends and closes: when the API reads the request, no process holds the client's socket.
    let client = "import socket,sys\n\
                  s=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\n\
                  print('connected',flush=True)\n\
                  sys.stdin.readline()\n\
                  s.sendall(sys.argv[2].encode())\n\
                  s.close()";
    let mut py = Command::new("python3")
        .args(["-c", client, &port.to_string(), &raw])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufReader::new(py.stdout.take().unwrap()).read_line(&mut said).unwrap();
    assert_eq!(said.trim(), "connected");
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(api_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    wait_for(Duration::from_secs(10), || all_threads_stopped(api_pid.as_raw() as u32).then_some(())).expect("stopped");
    py.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(py.wait().unwrap().success());
    nix::sys::signal::kill(api_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let refused =
        wait_for(Duration::from_secs(15), || b.controls("resume").into_iter().find(|r| r["outcome"] == "refused"))
            .expect("the resume is refused on the record");
    assert!(refused["detail"].as_str().unwrap_or("").contains("cannot tell which process"), "{refused}");
    assert!(b.controls("resume").iter().all(|r| r["outcome"] == "refused"), "{:?}", b.controls("resume"));
    let status = control(&b.sock(), &serde_json::json!({"verb":"status"}));
    assert_eq!(status["paused"], true, "{status}");
    drop(api);
}

/// Another user holds the port the CLI would reach the API on (the default 7878 while no API of ours
/// runs, or the one `HARNESS_API_ADDR` names): the CLI does not hand it this home's token — it says
/// who serves there and sends nothing.
#[test]
fn the_cli_never_sends_its_token_to_another_users_listener() {
    use std::io::{BufRead, Read};
    if !can_switch_uid() {
        return;
    }
    let Some(python) = nobody_python() else { return };
    let home = tempfile::tempdir().unwrap();
    // A listener of uid 65534 that prints everything it is sent.
    let server = "import socket,sys\n\
                  l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(8)\n\
                  print(l.getsockname()[1],flush=True)\n\
                  l.settimeout(20)\n\
                  while True:\n\
                  \x20   c,_=l.accept(); c.settimeout(2)\n\
                  \x20   try:\n\
                  \x20       d=c.recv(65536)\n\
                  \x20   except Exception:\n\
                  \x20       d=b''\n\
                  \x20   sys.stdout.write(repr(d)+'\\n'); sys.stdout.flush(); c.close()";
    let mut child = Command::new("setpriv")
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", python, "-c", server])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut port = String::new();
    out.read_line(&mut port).unwrap();
    let listener = Proc { child };
    let addr = format!("127.0.0.1:{}", port.trim());
    // Without a token (none made yet) a steer's words are no less private; with one, the token.
    let steer = harness(home.path())
        .env("HARNESS_API_ADDR", &addr)
        .args(["steer", "0123456789ab--x", "A", "private words"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&steer.stderr);
    assert_eq!(steer.status.code(), Some(4), "{err}");
    assert!(err.contains("served by uid 65534") && err.contains("nothing is sent"), "{err}");
    let (code, _, err) = cli(home.path(), &["token"]);
    assert_eq!(code, 0, "{err}");
    let run = harness(home.path()).env("HARNESS_API_ADDR", &addr).args(["runs"]).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(4), "{err}");
    assert!(err.contains(&addr) && err.contains("served by uid 65534") && err.contains("nothing is sent"), "{err}");
    drop(listener);
    let mut seen = String::new();
    let _ = out.read_to_string(&mut seen);
    assert!(!seen.to_ascii_lowercase().contains("authorization"), "the token reached the stranger: {seen}");
    assert!(
        !seen.contains("GET") && !seen.contains("POST") && !seen.contains("private words"),
        "nothing was sent: {seen}"
    );
}
