//! The wrapper contract, through the real scripts and the fake engines: exit codes, status line, log
//! appends and exit markers, timeout, SIGTERM to the process group, resume, the live channel's flags.

use crate::common::*;
use harness::supervisor::kill::group_members;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Wrapper {
    script: &'static str,
    bin_var: &'static str,
    fake: &'static str,
    /// Scenario that completes successfully.
    ok_scenario: &'static str,
}

const WRAPPERS: [Wrapper; 3] = [
    Wrapper { script: "na.sh", bin_var: "HARNESS_CLAUDE_BIN", fake: "fake-claude", ok_scenario: "success" },
    Wrapper { script: "ca.sh", bin_var: "HARNESS_CURSOR_BIN", fake: "fake-cursor-agent", ok_scenario: "success" },
    Wrapper { script: "codex.sh", bin_var: "HARNESS_CODEX_BIN", fake: "fake-codex", ok_scenario: "approve" },
];

struct Turn {
    dir: tempfile::TempDir,
}

impl Turn {
    fn new() -> Turn {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("repo")).unwrap();
        std::fs::write(dir.path().join("prompt"), "Say hi.\n").unwrap();
        Turn { dir }
    }
    fn log(&self) -> PathBuf {
        self.dir.path().join("logs/t.log")
    }
    fn record(&self) -> PathBuf {
        self.dir.path().join("record.jsonl")
    }
    fn cmd(&self, w: &Wrapper, scenario: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(repo_dir().join("wrappers").join(w.script));
        c.arg("--prompt-file")
            .arg(self.dir.path().join("prompt"))
            .arg("--cwd")
            .arg(self.dir.path().join("repo"))
            .arg("--log")
            .arg(self.log())
            .args(extra)
            .env(w.bin_var, repo_dir().join("fixtures/engines").join(w.fake))
            .env("HARNESS_FAKE_SCENARIO", scenario)
            .env("HARNESS_FAKE_PACE", "fast")
            .env("HARNESS_FAKE_RECORD", self.record())
            .env("HARNESS_KILL_GRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // As the supervisor does: the wrapper leads its own process group.
            .process_group(0);
        c
    }
    fn run(&self, w: &Wrapper, scenario: &str, extra: &[&str]) -> (i32, Value, Output) {
        let out = self.cmd(w, scenario, extra).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or_else(|| {
            panic!("{}: no status line; stderr: {}", w.script, String::from_utf8_lossy(&out.stderr))
        });
        let status: Value =
            serde_json::from_str(last).unwrap_or_else(|e| panic!("{}: status line {last:?}: {e}", w.script));
        (out.status.code().unwrap_or(-1), status, out)
    }
    fn markers(&self) -> Vec<Value> {
        // The log may hold a line the engine cut short: only the marker lines are parsed.
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("{\"harness\":\"exit\""))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    fn records(&self) -> Vec<Value> {
        json_lines(&self.record())
    }
}

fn first_args(w: &Wrapper) -> Vec<String> {
    let mut a = vec!["--timeout".to_string(), "30".to_string()];
    if w.script == "na.sh" {
        a.extend(["--session-id".to_string(), "0b7f3c8e-2f4a-4d5b-9a57-1c2d3e4f5a6b".to_string()]);
    }
    a
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn success_reports_status_line_and_exit_marker() {
    for w in &WRAPPERS {
        let t = Turn::new();
        let (rc, status, _) = t.run(w, w.ok_scenario, &strs(&first_args(w)));
        assert_eq!(rc, 0, "{}: {status}", w.script);
        assert_eq!(status["ok"], true);
        assert!(status["session_id"].as_str().is_some_and(|s| !s.is_empty()), "{}: {status}", w.script);
        assert!(status["files"].is_array() && status["detail"].is_string());
        let m = t.markers();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["rc"], 0);
        assert_eq!(m[0]["session_id"], status["session_id"]);
        if w.script == "na.sh" {
            assert_eq!(status["session_id"], "0b7f3c8e-2f4a-4d5b-9a57-1c2d3e4f5a6b", "the harness-assigned uuid");
        }
        if w.script == "codex.sh" {
            assert_eq!(status["detail"], "APPROVE");
            // The id is the thread_id of the first event of the stream.
            let first = std::fs::read_to_string(t.log()).unwrap().lines().next().unwrap().to_string();
            let v: Value = serde_json::from_str(&first).unwrap();
            assert_eq!(v["type"], "thread.started");
            assert_eq!(v["thread_id"], status["session_id"]);
        }
        // stderr of the engine goes to LOG.stderr, never into the log.
        assert!(t.dir.path().join("logs/t.log.stderr").exists());
    }
}

#[test]
fn codex_reject_is_reported_in_detail() {
    let t = Turn::new();
    let (rc, status, _) = t.run(&WRAPPERS[2], "reject", &["--timeout", "30"]);
    assert_eq!(rc, 0);
    assert_eq!(status["detail"], "REJECT: tests are missing");
    let (rc, status, _) = t.run(&WRAPPERS[2], "success", &["--timeout", "30"]);
    assert_eq!(rc, 3, "a final message with no verdict is a failed seat");
    assert!(status["detail"].as_str().unwrap().starts_with("no verdict"));
}

#[test]
fn engine_error_is_3_and_missing_engine_is_4() {
    for w in &WRAPPERS {
        let t = Turn::new();
        let (rc, status, _) = t.run(w, "error", &["--timeout", "30"]);
        assert_eq!(rc, 3, "{}: {status}", w.script);
        assert_eq!(status["ok"], false);
        assert_eq!(t.markers().last().unwrap()["rc"], 3);
        let mut c = t.cmd(w, "success", &["--timeout", "30"]);
        c.env(w.bin_var, "/nonexistent/engine");
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(4), "{}", w.script);
        let status: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
        assert!(status["detail"].as_str().unwrap().contains("engine missing"), "{status}");
        // The default (no override) names the binary and the variable.
        let mut c = t.cmd(w, "success", &["--timeout", "30"]);
        c.env_remove(w.bin_var).env("PATH", "/usr/bin:/bin");
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(4));
        assert!(String::from_utf8_lossy(&out.stdout).contains(w.bin_var));
    }
}

#[test]
fn exit_3_engine_is_engine_failure() {
    for w in &WRAPPERS {
        let t = Turn::new();
        let (rc, status, _) = t.run(w, "exit3", &["--timeout", "30"]);
        assert_eq!(rc, 3, "{}: {status}", w.script);
        assert!(status["detail"].as_str().unwrap().contains("exit 3"), "{status}");
    }
}

#[test]
fn timeout_is_124_within_timeout_plus_2s() {
    for w in &WRAPPERS {
        let t = Turn::new();
        let start = Instant::now();
        let (rc, status, _) = t.run(w, "hang", &["--timeout", "1"]);
        let took = start.elapsed();
        assert_eq!(rc, 124, "{}: {status}", w.script);
        assert!(took < Duration::from_secs(3), "{}: took {took:?}", w.script);
        assert_eq!(t.markers().last().unwrap()["rc"], 124);
    }
}

/// Pids whose process group is `pgid`.
#[test]
fn sigterm_to_the_process_group_leaves_no_engine_alive() {
    for w in &WRAPPERS {
        let t = Turn::new();
        let child = t.cmd(w, "hang", &["--timeout", "60"]).spawn().unwrap();
        let pgid = child.id() as i32;
        // Wait until the engine has printed (it is running in the group).
        let started = wait_for(Duration::from_secs(10), || {
            (std::fs::metadata(t.log()).map(|m| m.len()).unwrap_or(0) > 0 && group_members(pgid).len() >= 2)
                .then_some(())
        });
        assert!(started.is_some(), "{}: engine never started", w.script);
        let engine_pids = group_members(pgid);
        // SAFETY: signalling a process group this test created.
        assert_eq!(unsafe { libc::killpg(pgid, libc::SIGTERM) }, 0);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(143), "{}", w.script);
        let left = wait_for(Duration::from_secs(3), || group_members(pgid).is_empty().then_some(()));
        assert!(left.is_some(), "{}: processes left in the group: {:?}", w.script, group_members(pgid));
        for p in engine_pids {
            assert!(!Path::new(&format!("/proc/{p}")).exists() || group_members(pgid).is_empty());
        }
        let m = t.markers();
        assert_eq!(m.last().unwrap()["rc"], 143, "{}", w.script);
    }
}

#[test]
fn resume_passes_the_same_id_back_and_two_turns_share_one_log() {
    for w in &WRAPPERS {
        let t = Turn::new();
        let (rc, status, _) = t.run(w, w.ok_scenario, &strs(&first_args(w)));
        assert_eq!(rc, 0, "{}", w.script);
        let sid = status["session_id"].as_str().unwrap().to_string();
        let size = std::fs::metadata(t.log()).unwrap().len();
        let before = std::fs::read(t.log()).unwrap();
        let (rc, status2, _) = t.run(w, w.ok_scenario, &["--timeout", "30", "--resume", &sid]);
        assert_eq!(rc, 0, "{}", w.script);
        assert_eq!(status2["session_id"], sid.as_str());
        let after = std::fs::read(t.log()).unwrap();
        assert!(after.len() as u64 > size && after[..before.len()] == before[..], "{}: log not appended", w.script);
        let m = t.markers();
        assert_eq!(m.len(), 2, "{}", w.script);
        assert!(m.iter().all(|x| x["rc"] == 0 && x["session_id"] == sid.as_str()));
        let recs = t.records();
        let last_argv: Vec<&str> =
            recs.last().unwrap()["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        match w.script {
            "na.sh" | "ca.sh" => {
                let i = last_argv.iter().position(|a| *a == "--resume").expect("--resume passed");
                assert_eq!(last_argv[i + 1], sid);
            }
            _ => {
                assert_eq!(&last_argv[..2], &["exec", "resume"]);
                assert!(last_argv.contains(&sid.as_str()), "{last_argv:?}");
            }
        }
        // The whole log still normalizes with exit events for both turns.
        let out = Command::new(bin())
            .args([
                "normalize-events",
                match w.script {
                    "na.sh" => "claude",
                    "ca.sh" => "cursor",
                    _ => "codex",
                },
            ])
            .stdin(std::fs::File::open(t.log()).unwrap())
            .output()
            .unwrap();
        let events: Vec<Value> =
            String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(events.iter().filter(|e| e["type"] == "exit").count(), 2);
        assert!(events.iter().all(|e| e["type"] != "error"), "{}: {events:?}", w.script);
    }
}

#[test]
fn interactive_without_its_channel_is_refused_with_its_own_code() {
    let t = Turn::new();
    let (rc, status, _) = t.run(&WRAPPERS[0], "success", &["--timeout", "5", "--interactive"]);
    assert_eq!(rc, 5);
    assert!(status["detail"].as_str().unwrap().contains("--input FIFO"), "{status}");
    assert!(t.records().is_empty(), "the engine must not run");
    // --input must be a FIFO, and only goes with --interactive.
    let plain = t.dir.path().join("not-a-fifo");
    std::fs::write(&plain, "").unwrap();
    let p = plain.to_str().unwrap();
    let (rc, status, _) = t.run(&WRAPPERS[0], "success", &["--timeout", "5", "--interactive", "--input", p]);
    assert_eq!(rc, 2, "{status}");
    assert!(status["detail"].as_str().unwrap().contains("is not a FIFO"), "{status}");
    let (rc, status, _) = t.run(&WRAPPERS[0], "success", &["--timeout", "5", "--input", p]);
    assert_eq!(rc, 2, "{status}");
    assert!(status["detail"].as_str().unwrap().contains("goes with --interactive"), "{status}");
    // Other wrappers do not have the seam: a usage error.
    let (rc, _, _) = t.run(&WRAPPERS[1], "success", &["--timeout", "5", "--interactive"]);
    assert_eq!(rc, 2);
}

#[test]
fn usage_errors_are_2_with_a_reason() {
    let t = Turn::new();
    for (args, needle) in [
        (vec![], "--timeout is required"),
        (vec!["--timeout", "0"], "not a positive number"),
        (vec!["--timeout", "5", "--bogus"], "unknown flag --bogus"),
        (vec!["--timeout", "5", "--resume", "a b"], "characters outside"),
    ] {
        let (rc, status, _) = t.run(&WRAPPERS[0], "success", &args);
        assert_eq!(rc, 2, "{args:?}");
        assert!(status["detail"].as_str().unwrap().contains(needle), "{args:?}: {status}");
    }
}

#[test]
fn env_is_scoped_for_the_engine() {
    // The fake records its cwd; a wrapper-run engine sees only the allowlisted environment.
    let t = Turn::new();
    let probe = t.dir.path().join("env-probe");
    let fake = repo_dir().join("fixtures/engines/fake-claude");
    let script = format!("#!/usr/bin/env bash\nenv > \"$HARNESS_FAKE_RECORD.env\"\nexec {} \"$@\"\n", fake.display());
    std::fs::write(&probe, script).unwrap();
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut c = t.cmd(&WRAPPERS[0], "success", &["--timeout", "30"]);
    c.env("HARNESS_CLAUDE_BIN", &probe).env("SECRET_TOKEN", "leak").env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
    c.env("HARNESS_API_TOKEN", "api-secret").env("HARNESS_HOME", t.dir.path()).env("HARNESS_TASK", "T1");
    c.env("HARNESS_ENV_PASS", "MY_TOOL_CONFIG").env("MY_TOOL_CONFIG", "kept");
    assert!(c.output().unwrap().status.success());
    let env = std::fs::read_to_string(t.dir.path().join("record.jsonl.env")).unwrap();
    assert!(!env.contains("SECRET_TOKEN"), "unlisted variables must not reach the engine");
    assert!(!env.contains("HARNESS_API_TOKEN") && !env.contains("api-secret"), "the API token reached the engine");
    assert!(!env.contains("HARNESS_HOME="), "the home (its token file) is not the engine's business");
    assert!(env.contains("HARNESS_TASK=T1") && env.contains("MY_TOOL_CONFIG=kept"), "{env}");
    assert!(env.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:9"), "CCR routing must pass through");
}

#[test]
fn the_contract_probe_passes() {
    let out = Command::new("bash").arg(repo_dir().join("wrappers/_contract-probe.sh")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if !Command::new("jq").arg("--version").output().is_ok_and(|o| o.status.success()) {
        panic!("jq is required by wrappers/_contract-probe.sh (bash .ci/run installs it)");
    }
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(", 0 failed"), "{text}");
}

/// With `harness stamp` between the engine and the log (`HARNESS_STAMP`, as the supervisor sets
/// it): the same exit codes, status lines and log lines as without, SIGTERM to the group still ends
/// everything with 143 and the engine's last words in the log, and every engine line has its time.
#[test]
fn the_stamper_changes_no_exit_code_status_or_log_line() {
    let engine_lines = |t: &Turn| -> Vec<String> {
        std::fs::read_to_string(t.log())
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with("{\"harness\":\"exit\""))
            .map(|l| {
                // The fake cursor and codex engines draw a session id per run: masked.
                let mut out = l.to_string();
                for key in ["\"session_id\":\"", "\"thread_id\":\""] {
                    let mut parts = out.split(key);
                    let mut masked = parts.next().unwrap_or("").to_string();
                    for p in parts {
                        masked.push_str(key);
                        masked.push('…');
                        masked.push_str(p.split_once('"').map_or("", |(_, rest)| rest));
                    }
                    out = masked;
                }
                out
            })
            .collect()
    };
    for w in &WRAPPERS {
        for scenario in [w.ok_scenario, "exit3", "error"] {
            let mut seen = Vec::new();
            for stamp in [false, true] {
                let t = Turn::new();
                let args = first_args(w);
                let mut c = t.cmd(w, scenario, &strs(&args));
                if stamp {
                    c.env("HARNESS_STAMP", bin());
                }
                let out = c.output().unwrap();
                let status: Value =
                    serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
                let lines = engine_lines(&t);
                let mut times = harness::os::stamp::Times::of(&t.log());
                if stamp {
                    for (i, _) in lines.iter().enumerate() {
                        assert!(
                            times.at(i as u64 + 1).is_some(),
                            "{} {scenario}: line {} has no time",
                            w.script,
                            i + 1
                        );
                    }
                } else {
                    assert!(!harness::os::stamp::sidecar(&t.log()).exists());
                }
                seen.push((out.status.code(), status["ok"].clone(), status["detail"].clone(), lines));
            }
            assert_eq!(seen[0], seen[1], "{} {scenario}: stamped and not differ", w.script);
        }
        // SIGTERM to the group: 143, nothing left, the engine's last words in the log.
        let mut counts = Vec::new();
        for stamp in [false, true] {
            let t = Turn::new();
            let mut c = t.cmd(w, "hang", &["--timeout", "60"]);
            if stamp {
                c.env("HARNESS_STAMP", bin());
            }
            let child = c.spawn().unwrap();
            let pgid = child.id() as i32;
            let started = wait_for(Duration::from_secs(10), || {
                (std::fs::metadata(t.log()).map(|m| m.len()).unwrap_or(0) > 0 && group_members(pgid).len() >= 2)
                    .then_some(())
            });
            assert!(started.is_some(), "{}: engine never started", w.script);
            // SAFETY: signalling a process group this test created.
            assert_eq!(unsafe { libc::killpg(pgid, libc::SIGTERM) }, 0);
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(143), "{} stamp={stamp}", w.script);
            let left = wait_for(Duration::from_secs(3), || group_members(pgid).is_empty().then_some(()));
            assert!(left.is_some(), "{}: left in the group: {:?}", w.script, group_members(pgid));
            counts.push(engine_lines(&t).len());
        }
        assert_eq!(counts[0], counts[1], "{}: the lines after SIGTERM are all in the log", w.script);
    }
}

/// Every process's command line (`/proc/<pid>/cmdline`, readable by any uid) holding `needle`.
fn command_lines_holding(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else { continue };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if line.contains(needle) {
            found.push(format!("{}: {line}", e.file_name().to_string_lossy()));
        }
    }
    found
}

/// The engine's credentials and the `HARNESS_ENV_PASS` names reach it through its environment
/// (readable by its own uid only), never through a command line: with the stamper in the turn
/// (as the supervisor runs it), no process holds their values in its argv while the engine works.
#[test]
fn no_passed_value_is_on_any_command_line_while_the_engine_runs() {
    for (w, key) in WRAPPERS.iter().zip(["ANTHROPIC_API_KEY", "CURSOR_API_KEY", "OPENAI_API_KEY"]) {
        let t = Turn::new();
        let nonce =
            format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
        let (secret, passed) = (format!("sk-argv-probe-{nonce}"), format!("passed-argv-probe-{nonce}"));
        let mut c = t.cmd(w, "hang", &["--timeout", "60"]);
        c.env("HARNESS_STAMP", bin()).env(key, &secret);
        c.env("HARNESS_ENV_PASS", "MY_PASSED_SECRET").env("MY_PASSED_SECRET", &passed);
        let engine_env = t.dir.path().join("engine.env");
        c.env("HARNESS_FAKE_TOOL", format!("env > '{}'", engine_env.display()));
        let child = c.spawn().unwrap();
        let pgid = child.id() as i32;
        // The wrapper, its timer, the stamper and the engine (and the engine's sleep).
        let started = wait_for(Duration::from_secs(10), || {
            (std::fs::metadata(t.log()).map(|m| m.len()).unwrap_or(0) > 0 && group_members(pgid).len() >= 3)
                .then_some(())
        });
        assert!(started.is_some(), "{}: engine never started", w.script);
        let seen = [command_lines_holding(&secret), command_lines_holding(&passed)].concat();
        // SAFETY: signalling a process group this test created.
        assert_eq!(unsafe { libc::killpg(pgid, libc::SIGTERM) }, 0);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(143), "{}", w.script);
        assert!(seen.is_empty(), "{}: a passed value is on a command line:\n{}", w.script, seen.join("\n"));
        // They did reach the engine, by its environment.
        let env = std::fs::read_to_string(&engine_env).unwrap_or_default();
        assert!(env.contains(&format!("{key}={secret}")), "{}: {key} did not reach the engine", w.script);
        assert!(env.contains(&format!("MY_PASSED_SECRET={passed}")), "{}: HARNESS_ENV_PASS", w.script);
    }
}
