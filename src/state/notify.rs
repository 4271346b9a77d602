//! Notifications: `$HARNESS_HOME/notify.json` names hooks; a run's supervisor delivers the run's
//! attention-worthy journal records to them (`spec/NOTIFY.md`). This module holds the config, the
//! mapping from a journal record to a `notify/v1` event (pure), and one delivery to one hook
//! (blocking, bounded by a timeout). The tailing, retries and the delivered mark are the
//! supervisor's (`supervisor/notifier.rs`).

use crate::state::journal::{ApprovalState, Body, Record, RunEvent, TaskState};
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub const VERSION: &str = "notify/v1";

/// The kinds a hook can subscribe to.
pub const KINDS: [&str; 8] = [
    "run_finished",
    "run_failed",
    "run_stopped",
    "run_blocked",
    "task_halted",
    "run_paused",
    "task_stalled",
    "approval_pending",
];

/// One delivery may take this long (a dead webhook costs its retries, never the run).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Webhook(String),
    Ntfy(String),
    Exec(Vec<String>),
    Desktop,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub on: Vec<String>,
    pub target: Target,
}

impl Hook {
    pub fn wants(&self, kind: &str) -> bool {
        self.on.iter().any(|k| k == kind)
    }

    /// How the hook is named in logs and in `harness notify test`.
    pub fn label(&self) -> String {
        match &self.target {
            Target::Webhook(u) => format!("webhook {u}"),
            Target::Ntfy(u) => format!("ntfy {u}"),
            Target::Exec(a) => format!("exec {}", a.join(" ")),
            Target::Desktop => "desktop".into(),
        }
    }
}

/// `notify.json`: `None` when there is none; an error naming every problem when it is invalid.
/// It says which commands run (`exec` hooks): it must be this uid's, writable by no one else, not a
/// symbolic link (opened with `O_NOFOLLOW`), and at most `MAX_CONFIG` bytes.
pub fn load(home: &Path) -> Result<Option<Vec<Hook>>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = home.join("notify.json");
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!("{} is a symbolic link: make it a file of your own", path.display()));
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let meta = file.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let me = crate::os::peer::own_uid();
    if meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not by you (uid {me}): its exec hooks would run as you; make it yours",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by others (mode {:o}): anyone could add an exec hook; chmod 600 it",
            path.display(),
            meta.mode() & 0o777
        ));
    }
    if !meta.is_file() || meta.len() > MAX_CONFIG {
        return Err(format!("{} is not a file of at most {MAX_CONFIG} bytes", path.display()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&bytes).map(Some).map_err(|e| format!("{}: {e}", path.display()))
}

/// The largest `notify.json` read (a config, not data).
const MAX_CONFIG: u64 = 1 << 20;

/// Parses a `notify/v1` config; every problem is named.
pub fn parse(bytes: &[u8]) -> Result<Vec<Hook>, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let mut errs = Vec::new();
    if v["v"] != VERSION {
        errs.push(format!("v: expected \"{VERSION}\", got {}", v["v"]));
    }
    if let Some(k) = v.as_object().and_then(|o| o.keys().find(|k| !["v", "hooks"].contains(&k.as_str()))) {
        errs.push(format!("unknown field {k:?}"));
    }
    let mut hooks = Vec::new();
    match v["hooks"].as_array() {
        None => errs.push("hooks: must be a list".into()),
        Some(list) => {
            for (i, h) in list.iter().enumerate() {
                match hook(h) {
                    Ok(h) => hooks.push(h),
                    Err(e) => errs.push(format!("hooks[{i}]: {e}")),
                }
            }
        }
    }
    if errs.is_empty() { Ok(hooks) } else { Err(errs.join("; ")) }
}

fn hook(h: &Value) -> Result<Hook, String> {
    let o = h.as_object().ok_or("must be an object")?;
    let on: Vec<String> = match o.get("on").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => a.iter().map(|k| k.as_str().unwrap_or("").to_string()).collect(),
        _ => return Err(format!("on: a non-empty list of kinds ({})", KINDS.join(", "))),
    };
    if let Some(bad) = on.iter().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(format!("on: unknown kind {bad:?} (expected {})", KINDS.join(", ")));
    }
    let url = |k: &str| -> Result<String, String> {
        let u = o[k].as_str().unwrap_or("");
        if u.starts_with("http://") || u.starts_with("https://") {
            Ok(u.to_string())
        } else {
            Err(format!("{k}: an http:// or https:// URL, got {}", o[k]))
        }
    };
    let targets: Vec<&str> =
        ["webhook", "ntfy", "exec", "desktop"].into_iter().filter(|k| o.contains_key(*k)).collect();
    if let Some(k) = o.keys().find(|k| !["on", "webhook", "ntfy", "exec", "desktop"].contains(&k.as_str())) {
        return Err(format!("unknown field {k:?}"));
    }
    let target = match targets.as_slice() {
        ["webhook"] => Target::Webhook(url("webhook")?),
        ["ntfy"] => Target::Ntfy(url("ntfy")?),
        ["exec"] => match o["exec"].as_array() {
            Some(a) if !a.is_empty() && a.iter().all(|x| x.as_str().is_some_and(|s| !s.is_empty())) => {
                Target::Exec(a.iter().map(|x| x.as_str().unwrap_or_default().to_string()).collect())
            }
            _ => return Err(format!("exec: an argv list of non-empty strings, got {}", o["exec"])),
        },
        ["desktop"] if o["desktop"] == true => Target::Desktop,
        ["desktop"] => return Err(format!("desktop: must be true, got {}", o["desktop"])),
        _ => return Err("exactly one of webhook, ntfy, exec or desktop".into()),
    };
    Ok(Hook { on, target })
}

/// One notification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub v: &'static str,
    /// `<runId>:<journal line>`: the same record always makes the same id (deduplication).
    pub id: String,
    pub kind: &'static str,
    pub run: String,
    pub task: Option<String>,
    pub detail: Option<String>,
    pub ts: String,
}

/// The notification a journal record makes, if any.
pub fn event_of(run: &str, line: u64, rec: &Record) -> Option<Event> {
    let (kind, task, detail): (&'static str, Option<String>, Option<String>) = match &rec.body {
        Body::Run(r) => match r.event {
            RunEvent::Finished => ("run_finished", None, r.detail.clone()),
            RunEvent::Failed => ("run_failed", None, r.detail.clone()),
            RunEvent::Stopped => ("run_stopped", None, r.detail.clone()),
            RunEvent::Blocked => {
                let fails = r
                    .fails_at
                    .as_deref()
                    .map(|t| format!("; the run fails at {t} unless a task is retried, steered or skipped"))
                    .unwrap_or_default();
                ("run_blocked", None, Some(format!("{}{fails}", r.detail.as_deref().unwrap_or("blocked"))))
            }
            RunEvent::Paused => {
                let by = r.by.clone().unwrap_or_else(|| "operator".into());
                (
                    "run_paused",
                    None,
                    Some(r.detail.clone().map_or(format!("paused by {by}"), |d| format!("{d} (by {by})"))),
                )
            }
            _ => return None,
        },
        Body::Task(t) if t.state == TaskState::Halted => ("task_halted", Some(t.task.to_string()), t.detail.clone()),
        Body::Attention(a) if a.attention == "stalled" => ("task_stalled", Some(a.task.to_string()), a.detail.clone()),
        Body::Approval(a) if a.state == ApprovalState::Pending => {
            let input = a.input.as_ref().map(|i| i.to_string()).unwrap_or_default();
            let input: String = input.chars().take(300).collect();
            let tool = a.tool.clone().unwrap_or_default();
            ("approval_pending", Some(a.task.to_string()), Some(format!("{tool} {input} (approval {})", a.id)))
        }
        _ => return None,
    };
    Some(Event {
        v: VERSION,
        id: format!("{run}:{line}"),
        kind,
        run: run.to_string(),
        task,
        detail,
        ts: rec.ts.clone(),
    })
}

/// A sample event for `harness notify test`.
pub fn sample() -> Event {
    Event {
        v: VERSION,
        id: format!("test:{}", uuid::Uuid::new_v4()),
        kind: "run_finished",
        run: "000000000000--notify-test".into(),
        task: None,
        detail: Some("a test notification from harness notify test".into()),
        ts: crate::state::journal::now_rfc3339(),
    }
}

/// Delivers `e` to `hook` once. Blocking, at most `DELIVERY_TIMEOUT`.
pub fn deliver(hook: &Hook, e: &Event) -> Result<(), String> {
    let json = serde_json::to_string(e).expect("an event serializes");
    let secs = DELIVERY_TIMEOUT.as_secs().to_string();
    match &hook.target {
        // The URL (a webhook URL is a credential) and the body go to curl on its stdin, as a config
        // (`-K -`): `ps` shows other users nothing but the options below.
        Target::Webhook(url) => {
            let config = curl_config(url, &["Content-Type: application/json"], &json);
            run(Command::new("curl").args(["-sS", "--fail", "--max-time", &secs, "-K", "-"]), config.as_bytes())
        }
        Target::Ntfy(url) => {
            let title = format!("harness: {} {}", e.kind.replace('_', " "), e.task.as_deref().unwrap_or(&e.run));
            let priority = match e.kind {
                "run_failed" | "run_blocked" | "task_halted" | "approval_pending" | "task_stalled" => "high",
                _ => "default",
            };
            let body = format!("{}\n{}", e.detail.as_deref().unwrap_or(e.kind), e.run);
            let headers = [format!("Title: {title}"), format!("Priority: {priority}"), format!("Tags: {}", e.kind)];
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            let config = curl_config(url, &headers, &body);
            run(Command::new("curl").args(["-sS", "--fail", "--max-time", &secs, "-K", "-"]), config.as_bytes())
        }
        Target::Exec(argv) => run(Command::new(&argv[0]).args(&argv[1..]), json.as_bytes()),
        Target::Desktop => run(
            Command::new("notify-send").args([
                &format!("harness: {}", e.kind.replace('_', " ")),
                &format!("{} {}", e.run, e.detail.as_deref().unwrap_or("")),
            ]),
            b"",
        ),
    }
}

/// A curl config (`-K`) that POSTs `body` with `headers` to `url`. Values are quoted with curl's
/// escapes; `data-raw` never reads a file, whatever the body starts with.
fn curl_config(url: &str, headers: &[&str], body: &str) -> String {
    let q = |v: &str| {
        let mut out = String::with_capacity(v.len() + 2);
        out.push('"');
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    };
    let mut config = format!("url = {}\nrequest = \"POST\"\n", q(url));
    for h in headers {
        config.push_str(&format!("header = {}\n", q(h)));
    }
    config.push_str(&format!("data-raw = {}\n", q(body)));
    config
}

/// Runs `cmd` with `stdin` fed, killed after the delivery timeout; Ok when it exits 0.
fn run(cmd: &mut Command, stdin: &[u8]) -> Result<(), String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin);
    }
    let deadline = std::time::Instant::now() + DELIVERY_TIMEOUT + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                let err: String = err.trim().chars().take(300).collect();
                return Err(format!("{program} exited {}: {err}", status.code().unwrap_or(-1)));
            }
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} took longer than {} s", DELIVERY_TIMEOUT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {

    /// One HTTP request read off a loopback listener, answered 200; returns (request line + headers, body).
    fn one_request(l: std::net::TcpListener) -> (String, String) {
        use std::io::{BufRead, BufReader, Read, Write};
        let (mut c, _) = l.accept().unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let (mut head, mut len) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").unwrap();
        (head, String::from_utf8(body).unwrap())
    }

    #[test]
    fn a_webhook_gets_the_body_whole_and_its_url_is_not_on_the_command_line() {
        if Command::new("curl").arg("--version").output().is_err() {
            return; // curl is a runtime dependency; .ci/run has it
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/hooks/s3cr3t-path", l.local_addr().unwrap().port());
        let got = std::thread::spawn(move || one_request(l));
        let mut e = sample();
        e.detail = Some("@not-a-file \"quoted\" back\\slash\nnew line\ttab".into());
        let hook = Hook { on: vec!["run_finished".into()], target: Target::Webhook(url.clone()) };
        deliver(&hook, &e).unwrap();
        let (head, body) = got.join().unwrap();
        assert!(head.starts_with("POST /hooks/s3cr3t-path "), "{head}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["detail"], e.detail.clone().unwrap());
        let config = curl_config(&url, &["A: b"], "x");
        assert!(config.contains("s3cr3t-path"), "the URL goes in the config on stdin");
    }

    use super::*;

    #[test]
    fn a_config_names_every_problem() {
        let err = parse(
            br#"{"v":"notify/v1","hooks":[{"on":["run_done"],"webhook":"http://x"},
            {"on":["run_failed"],"webhook":"ftp://x"},{"on":["run_failed"],"exec":[]},
            {"on":["run_failed"],"webhook":"http://x","desktop":true}]}"#,
        )
        .unwrap_err();
        assert!(err.contains("hooks[0]: on: unknown kind \"run_done\""), "{err}");
        assert!(err.contains("hooks[1]: webhook: an http:// or https:// URL"), "{err}");
        assert!(err.contains("hooks[2]: exec: an argv list"), "{err}");
        assert!(err.contains("hooks[3]: exactly one of webhook, ntfy, exec or desktop"), "{err}");
        let ok = parse(
            br#"{"v":"notify/v1","hooks":[{"on":["run_failed","task_halted"],"ntfy":"https://ntfy.sh/t"},
            {"on":["approval_pending"],"exec":["/bin/true"]},{"on":["run_finished"],"desktop":true}]}"#,
        )
        .unwrap();
        assert_eq!(ok.len(), 3);
        assert!(ok[0].wants("task_halted") && !ok[0].wants("run_finished"));
    }

    #[test]
    fn records_map_to_events_with_stable_ids() {
        let rec = |line: &str| crate::state::journal::parse_line(line.as_bytes()).unwrap();
        let halted = rec(
            r#"{"v":"runstate/v1","ts":"2026-12-01T00:00:00.000Z","kind":"task","task":"A","state":"halted","rc":1,"detail":"gate failed"}"#,
        );
        let e = event_of("r1", 7, &halted).unwrap();
        assert_eq!(
            (e.id.as_str(), e.kind, e.task.as_deref(), e.detail.as_deref()),
            ("r1:7", "task_halted", Some("A"), Some("gate failed"))
        );
        let paused = rec(
            r#"{"v":"runstate/v1","ts":"2026-12-01T00:00:00.000Z","kind":"run","event":"paused","by":"budget","detail":"budget: the run spent $1 of its $1 budget"}"#,
        );
        assert_eq!(
            event_of("r1", 8, &paused).unwrap().detail.unwrap(),
            "budget: the run spent $1 of its $1 budget (by budget)"
        );
        let leased =
            rec(r#"{"v":"runstate/v1","ts":"2026-12-01T00:00:00.000Z","kind":"task","task":"A","state":"leased"}"#);
        assert!(event_of("r1", 9, &leased).is_none());
    }
}
