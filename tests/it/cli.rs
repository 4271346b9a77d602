//! The command line as a person meets it: a batch run's plain progress lines, person text by default
//! and `--json` (status and stop unchanged under it), `show RUN TASK`, the words, ages and costs of
//! `runs`, completions and man pages, and a CLI that talks to its own home's API only.

use crate::common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn plan(tasks: &[serde_json::Value]) -> String {
    serde_json::json!({"v": "plan/v1", "slug": "words", "tasks": tasks}).to_string()
}

#[test]
fn a_batch_run_prints_one_plain_line_per_task_change_and_its_log_only_with_v() {
    let b = Bench::new();
    let p = b.plan(&plan(&[
        serde_json::json!({"id": "A", "wave": 1, "adapter": "claude", "prompt": "a [fake-write:a.txt]"}),
        serde_json::json!({"id": "B", "wave": 2, "adapter": "claude", "prompt": "b [fake-write:b.txt]"}),
    ]));
    let out = b.harness("success").env_remove("RUST_LOG").arg("run").arg(&p).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    for want in
        ["A            running", "A            done", "B            running", "B            done", "run finished"]
    {
        assert!(stdout.lines().any(|l| l.contains(want)), "no line with {want:?}:\n{stdout}");
    }
    for noise in ["INFO", "RUN_ID=", "na.sh:", "claude session"] {
        assert!(!stdout.contains(noise) && !stderr.contains(noise), "{noise:?} printed:\n{stdout}\n{stderr}");
    }
    // Each progress line is "HH:MM:SS  what": a clock first, no tracing format.
    let progress: Vec<&str> = stdout.lines().filter(|l| l.contains("  A  ") || l.contains("A            ")).collect();
    assert!(
        progress.iter().all(|l| l.as_bytes().get(2) == Some(&b':') && l.as_bytes().get(5) == Some(&b':')),
        "{progress:?}"
    );

    // -v: the supervisor's log (and the wrapper's notes) on stderr, the same lines on stdout.
    let b = Bench::new();
    let p = b.plan(&plan(&[serde_json::json!({"id": "A", "wave": 1, "adapter": "claude", "prompt": "a"})]));
    let out = b.harness("success").env_remove("RUST_LOG").args(["run", "-v"]).arg(&p).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("INFO") && stderr.contains("claude session"), "-v shows the log: {stderr}");
    assert!(stdout.contains("A            done"), "{stdout}");

    // --json: the journal's own lines.
    let b = Bench::new();
    let p = b.plan(&plan(&[serde_json::json!({"id": "A", "wave": 1, "adapter": "claude", "prompt": "a"})]));
    let out = b.harness("success").env_remove("RUST_LOG").args(["run", "--json"]).arg(&p).output().unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .take_while(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|r| r["kind"] == "task" && r["state"] == "committed"), "{lines:?}");
    assert!(lines.iter().all(|r| r["v"] == "runstate/v1"), "{lines:?}");
}

#[test]
fn status_stop_show_and_runs_speak_words_and_keep_their_json() {
    let b = Bench::new();
    let plan = plan(&[
        serde_json::json!({"id": "A", "wave": 1, "adapter": "claude", "prompt": "first [fake-cost:0.0013] [fake-write:a.txt]"}),
        serde_json::json!({"id": "B", "wave": 2, "adapter": "claude", "prompt": "waits [fake-claude:hang]"}),
    ]);
    let _sup = b.start_supervised(&plan, "success", &[]);
    let run = b.run_id();
    b.wait_state("B", "leased", T);
    let _api = ApiProc::start(&b.home(), &[]);
    let home = b.home();

    let (code, out, err) = cli(&home, &["status", &run]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("run {run}: running")) && out.contains("A") && out.contains("done"), "{out}");
    assert!(out.contains("B") && out.contains("running (turn running)"), "{out}");
    let (code, out, err) = cli(&home, &["status", &run, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["ok"].as_bool(), v["status"].as_str()), (Some(true), Some("running")), "{v}");
    assert_eq!(v["tasks"]["A"]["state"], "committed", "--json keeps the wire's words: {v}");

    let (code, out, err) = cli(&home, &["runs"]);
    assert_eq!(code, 0, "{err}");
    let row = out.lines().find(|l| l.starts_with(&run)).unwrap_or_else(|| panic!("{out}"));
    assert!(out.lines().next().unwrap().contains("COST") && out.lines().next().unwrap().contains("ACTIVE"), "{out}");
    assert!(row.contains("running") && row.contains("$0.0013") && row.contains(" ago"), "{row}");
    assert!(out.lines().all(|l| l == l.trim_end()), "no trailing spaces:\n{out:?}");

    let (code, out, err) = cli(&home, &["show", &run, "A"]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "task A of run",
        "· done ·",
        "session",
        "cost       $0.0013",
        "commit",
        "(integrated)",
        "a.txt",
        "attempts",
        "events     harness watch",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    assert!(out.contains("A: first"), "the commit's subject, its directives left out:\n{out}");
    let (code, out, err) = cli(&home, &["show", &run, "B"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("· running ·") && out.contains("process    pid ") && out.contains("running for"), "{out}");
    let (code, out, _) = cli(&home, &["show", &run, "B", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["task"]["task"], "B");
    let (code, out, _) = cli(&home, &["show", &run]);
    assert_eq!(code, 0);
    assert!(
        out.contains("1/2 tasks done") && out.contains("started ") && out.lines().all(|l| l == l.trim_end()),
        "{out}"
    );

    let (code, out, err) = cli(&home, &["stop", &run, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["detail"].as_str().is_some(), "{v}");
    wait_for(T, || (b.view()["status"] == "stopped").then_some(())).expect("stopped");
    // A verb on a run that is over says so in words: no socket path, no os error.
    wait_for(T, || (!harness::control::is_live(&b.sock())).then_some(())).expect("the supervisor is gone");
    let (code, _, err) = cli(&home, &["kill", &run, "B"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("run {run} was stopped")) && err.contains(&format!("its events: harness watch {run} B")),
        "{err}"
    );
    assert!(!err.contains("os error") && !err.contains(".sock"), "{err}");
    let (code, _, err) = cli(&home, &["status", &run]);
    assert_eq!(code, 1);
    assert!(err.contains("is over (stopped)") && !err.contains("os error"), "{err}");
}

#[test]
fn the_cli_talks_to_its_own_homes_api_only() {
    let a = tempfile::tempdir().unwrap();
    install_fixture_runs(a.path());
    let api = ApiProc::start(a.path(), &[]);
    // `harness api` serves the home's own socket by default, and says which home it serves.
    assert!(a.path().join("sock/api.sock").exists(), "no sock/api.sock");
    let id = api.get("/runs").header("harness-home").map(str::to_string).expect("Harness-Home");
    assert!(id.len() == 16 && id.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
    let (code, out, err) = cli(a.path(), &["runs"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 6, "the header and the 5 runs: {out}");

    // Another home, an address that reaches home A's API: refused, exit 4, saying so.
    let b = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", api.port);
    let out = harness(b.path()).env("HARNESS_API_ADDR", &addr).args(["runs"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("serves another harness home") && err.contains(&id), "{err}");
    // What to do is said once.
    assert!(err.contains(&format!("pass --api {addr} to use that one")), "{err}");
    assert_eq!(err.matches("harness api").count(), 1, "{err}");
    assert!(!err.contains("--api ADDR"), "{err}");
    assert!(out.stdout.is_empty(), "nothing of the other home is listed");
    // --api: that API, whatever it serves.
    let out = harness(b.path()).args(["runs", "--api", &addr]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 6);
}

#[test]
fn completions_and_man_pages_are_printed() {
    let home = tempfile::tempdir().unwrap();
    for (shell, want) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef harness"),
        ("fish", "complete -c harness"),
        ("elvish", "harness"),
        ("powershell", "harness"),
    ] {
        let (code, out, err) = cli(home.path(), &["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(want) && out.contains("steer"), "{shell}: {}", &out[..out.len().min(200)]);
        // The plumbing harness's own processes start is not offered to a person.
        let words: Vec<&str> = out.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').collect();
        assert!(!words.contains(&"approval-mcp") && !words.contains(&"stamp"), "{shell} completes the plumbing");
    }
    let log = home.path().join("stamped.log");
    let (code, _, err) = cli(home.path(), &["stamp", "--log", log.to_str().unwrap(), "--", "echo", "hi"]);
    assert_eq!((code, std::fs::read_to_string(&log).unwrap().as_str()), (0, "hi\n"), "{err}");
    let (code, _, err) = cli(home.path(), &["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = cli(home.path(), &["man"]);
    assert_eq!(code, 0);
    assert!(out.contains(".TH harness 1") && out.contains("harness\\-steer(1)"), "{}", &out[..300]);
    let dir = home.path().join("man");
    let (code, _, err) = cli(home.path(), &["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for page in ["harness.1", "harness-steer.1", "harness-debug-journal.1"] {
        assert!(dir.join(page).is_file(), "no {page}");
    }
    let (code, _, err) = cli(home.path(), &["man", "--json"]);
    assert_eq!(code, 2);
    assert!(err.contains("`harness man` has no JSON output"), "{err}");
    // The plumbing is under `debug`, its old name still works, and `--help` has examples.
    let (code, out, _) = cli(home.path(), &["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Examples:") && out.contains("debug") && !out.contains("\n  journal "), "{out}");
    let (code, out, _) = cli(home.path(), &["steer", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Examples:") && out.contains("<RUN>") && out.contains("its runId, its slug"), "{out}");
    let (code, _, err) = cli(home.path(), &["journal", "show", "0123456789ab--nope"]);
    assert_ne!(code, 2, "the old name parses: {err}");
}

#[test]
fn clock_times_are_the_local_clocks() {
    let home = tempfile::tempdir().unwrap();
    let runs = install_fixture_runs(home.path());
    let run = run_id_of(&runs, "finished");
    let api = ApiProc::start(home.path(), &[]);
    let at = format!("127.0.0.1:{}", api.port);
    // T1's attempt started at 09:00:00 UTC (the fixture's journal).
    let show = |tz: &str| {
        let o = harness(home.path()).env("TZ", tz).args(["show", &run, "T1", "--api", &at]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let attempt = |out: &str| out.lines().skip_while(|l| l.trim() != "attempts").nth(1).unwrap_or_default().to_string();
    assert!(attempt(&show("UTC0")).contains(" 09:00:00 "), "{}", show("UTC0"));
    // Five hours west (a POSIX rule: no tz database needed), and New York where the database is.
    let mut zones = vec!["EST5"];
    if std::path::Path::new("/usr/share/zoneinfo/America/New_York").exists() {
        zones.push("America/New_York");
    }
    for tz in zones {
        let out = show(tz);
        assert!(attempt(&out).contains(" 04:00:00 "), "{tz}: {out}");
    }
}

#[test]
fn the_api_removes_its_socket_when_it_stops_and_the_cli_passes_over_a_stale_one() {
    let home = tempfile::tempdir().unwrap();
    install_fixture_runs(home.path());
    let sock = home.path().join("sock/api.sock");
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut api = ApiProc::start(home.path(), &[]);
        assert!(sock.exists(), "no {}", sock.display());
        // SAFETY: signalling our own child.
        unsafe { libc::kill(api.proc.child.id() as i32, sig) };
        api.proc.wait_exit(T);
        assert!(!sock.exists(), "signal {sig}: {} left behind", sock.display());
    }
    // A socket file nobody listens on (an API killed with SIGKILL cannot remove its own): the CLI
    // goes to TCP as if there were none — the default address, which the error names, not the
    // socket's "Connection refused".
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let out = harness(home.path()).env_remove("HARNESS_API_ADDR").args(["runs"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("cannot reach the API at 127.0.0.1:7878") && !err.contains("api.sock"), "{err}");
    // An API that starts again takes the path over, and the CLI uses it.
    let _api = ApiProc::start(home.path(), &[]);
    let (code, out, err) = cli(home.path(), &["runs"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 6, "{out}");
}

#[test]
fn a_batch_run_whose_output_is_closed_early_runs_to_its_end() {
    let b = Bench::new();
    let p = b.plan(&plan(&[
        serde_json::json!({"id": "A", "wave": 1, "adapter": "claude", "prompt": "a [fake-write:a.txt]"}),
        serde_json::json!({"id": "B", "wave": 2, "adapter": "claude", "prompt": "b [fake-write:b.txt]"}),
        serde_json::json!({"id": "C", "wave": 3, "adapter": "claude", "prompt": "c [fake-write:c.txt]"}),
    ]));
    // `harness run plan.json | head -1`: the reader takes a line and goes away.
    let mut child = b
        .harness("success")
        .env_remove("RUST_LOG")
        .arg("run")
        .arg(&p)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
    assert!(first.contains("started"), "{first}");
    let mut p = Proc { child };
    assert_eq!(p.wait_exit(T), 0, "the run ends as it would have");
    let v = b.view();
    assert_eq!(v["status"], "finished", "{v}");
    for t in ["A", "B", "C"] {
        assert_eq!(v["tasks"][t]["state"], "committed", "{v}");
    }
}
