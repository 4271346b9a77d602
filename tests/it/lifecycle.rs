//! The run lifecycle a person drives: preflight before anything is registered, re-runs, short
//! references, blocked runs, retry and skip, a clean stop.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

/// Nothing of a run is on disk: no runstate journal, no registry pointer.
fn nothing_registered(b: &Bench) {
    let runstate = b.repo().join("runstate");
    let journals: Vec<_> = std::fs::read_dir(&runstate)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(journals.is_empty(), "runstate holds {journals:?}");
    let pointers: Vec<_> = std::fs::read_dir(b.home().join("runs"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(pointers.is_empty(), "a run was registered: {pointers:?}");
}

#[test]
fn a_missing_or_broken_engine_is_refused_before_anything_is_registered() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"pre","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x","review":true},
            {"id":"B","wave":1,"adapter":"cursor","prompt":"y"}]}"#,
    );
    let broken = b.dir.path().join("broken-codex");
    std::fs::write(&broken, "#!/bin/sh\necho 'codex: cannot load its config' >&2\nexit 7\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = b
        .harness("success")
        .env("HARNESS_CLAUDE_BIN", b.dir.path().join("no-such-claude"))
        .env("HARNESS_CODEX_BIN", &broken)
        .args(["run", "--supervised"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("nothing was registered"), "{err}");
    assert!(err.contains("adapter claude (task A): HARNESS_CLAUDE_BIN="), "{err}");
    assert!(err.contains("is not an executable file"), "{err}");
    assert!(err.contains("adapter codex (task A's review)") && err.contains("cannot load its config"), "{err}");
    assert!(!err.contains("adapter cursor"), "the working engine is not named: {err}");
    nothing_registered(&b);
    assert!(!b.record().exists(), "an engine turn ran");
    // Not on PATH at all, with no variable set: the fix names the variable.
    let out = b
        .harness("success")
        .env_remove("HARNESS_CLAUDE_BIN")
        .env("PATH", "/usr/bin:/bin")
        .args(["run"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("claude not found on PATH: install it, or set HARNESS_CLAUDE_BIN"), "{err}");
    nothing_registered(&b);
}

#[test]
fn a_setup_program_that_does_not_exist_and_a_wrong_branch_are_refused() {
    let b = Bench::new();
    let p = b.plan(
        r#"{"v":"plan/v1","slug":"pre","base_branch":"release","setup":"cp .env.example .env && no-such-tool install",
            "tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"}]}"#,
    );
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("setup: \"no-such-tool\" is not a command here"), "{err}");
    assert!(!err.contains("\"cp\""), "{err}");
    assert!(err.contains("base_branch: the plan runs on \"release\"") && err.contains("git switch release"), "{err}");
    nothing_registered(&b);
}

fn pointer(b: &Bench, run: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(b.home().join("runs").join(format!("{run}.json"))).unwrap()).unwrap()
}

#[test]
fn a_plan_run_three_times_makes_three_runs_each_with_its_own_slug_commit_and_history() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"again","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"}]}"#;
    let p = b.plan(plan);
    let mut ids = Vec::new();
    for n in 1..=3 {
        let out = b.harness("success").arg("run").arg(&p).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "run {n}: {text}");
        let id = b.run_id();
        assert!(text.contains(&id), "run {n} prints its id {id}: {text}");
        ids.push(id);
    }
    let slugs: Vec<&str> = ids.iter().map(|i| i.split("--").nth(1).unwrap()).collect();
    assert_eq!(slugs, vec!["again", "again-2", "again-3"]);
    for (i, id) in ids.iter().enumerate() {
        // Each run's journal is its own, finished, with its own commit of A.
        let j = json_lines(&b.repo().join(format!("runstate/{}.jsonl", slugs[i])));
        assert!(j.iter().any(|r| r["kind"] == "run" && r["event"] == "finished"), "{id}");
        assert_eq!(harness::os::git::count_task_commits(&b.repo(), id, "A"), 1, "{id}: its own commit");
        let ptr = pointer(&b, id);
        assert_eq!(ptr["baseSlug"].as_str(), if i == 0 { None } else { Some("again") }, "{ptr}");
    }
    // --slug chooses; a taken one is refused naming the run that holds it.
    let out = b.harness("success").args(["run", "--slug", "again-2"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--slug again-2 is taken") && err.contains(&ids[1]), "{err}");
    let out = b.harness("success").args(["run", "--slug", "hotfix"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(pointer(&b, &b.run_id().replace("again-3", "hotfix"))["baseSlug"], "again");
}

#[test]
fn a_live_run_of_the_plan_is_refused_and_two_reruns_started_at_once_take_different_slugs() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"busy","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let p = b.plan(plan);
    // A registered run that has not ended is live (its supervisor may be gone: it counts until stopped).
    let out = b.harness("success").args(["run", "--register-only"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = b.run_id();
    let out = b.harness("success").arg("run").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&live) && err.contains("harness stop"), "names the live run and what ends it: {err}");
    // With --slug the plan may run beside it; two at once never share a slug.
    let spawn = |s: &str| b.harness("success").args(["run", "--register-only", "--slug", s]).arg(&p).spawn().unwrap();
    let (mut x, mut y) = (spawn("twin"), spawn("twin"));
    let codes = [x.wait().unwrap().code(), y.wait().unwrap().code()];
    assert!(codes.contains(&Some(0)) && codes.contains(&Some(2)), "one takes twin, the other is refused: {codes:?}");
    // Once the plan's own run has ended, re-runs started together take -2 and -3.
    let (code, _, err) =
        cli(&b.home(), &["journal", "append", &live, r#"{"kind":"run","event":"failed","by":"test"}"#]);
    assert_eq!(code, 0, "{err}");
    let spawn = || b.harness("success").args(["run", "--register-only"]).arg(&p).output().unwrap();
    let (x, y) = std::thread::scope(|s| {
        let x = s.spawn(spawn);
        let y = s.spawn(spawn);
        (x.join().unwrap(), y.join().unwrap())
    });
    let mut got: Vec<String> = [x, y]
        .iter()
        .map(|o| {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().rsplit("--").next().unwrap().to_string()
        })
        .collect();
    got.sort();
    assert_eq!(got, vec!["busy-2", "busy-3"]);
}

const T: std::time::Duration = std::time::Duration::from_secs(30);

fn post(api: &ApiProc, path: &str, body: &serde_json::Value) -> Resp {
    let b = body.to_string();
    http(api.port, "POST", path, &[("Content-Type", "application/json")], Some(b.as_bytes()))
}

fn wait_status(api: &ApiProc, run: &str, status: &str) -> serde_json::Value {
    wait_for(T, || {
        let v = api.get(&format!("/runs/{run}")).json();
        (v["status"] == status).then_some(v)
    })
    .unwrap_or_else(|| panic!("run never {status}: {}", api.get(&format!("/runs/{run}")).text()))
}

#[test]
fn a_halted_wave_blocks_the_run_and_a_retry_takes_it_to_the_end() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"blk","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]"},
        {"id":"Z","wave":2,"adapter":"claude","prompt":"z [fake-write:z.txt]"}]}"#;
    // The engine fails its first invocation with an API error, then works.
    let mut sup = b.start_supervised(plan, "error,success", &["--linger", "10m"]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let v = wait_status(&api, &run, "blocked");
    let blocked_by = v["blocked_by"].as_array().unwrap();
    assert_eq!(blocked_by.len(), 1, "{v}");
    assert_eq!((blocked_by[0]["task"].as_str(), blocked_by[0]["state"].as_str()), (Some("A"), Some("halted")));
    assert!(blocked_by[0]["detail"].as_str().unwrap().contains("API Error"), "{v}");
    let fails_at = v["fails_at"].as_str().expect("fails_at");
    let at = humantime::parse_rfc3339_weak(fails_at).unwrap();
    let left = at.duration_since(std::time::SystemTime::now()).unwrap_or_default().as_secs();
    assert!((500..=600).contains(&left), "fails about the 10-minute linger from now: {fails_at}");
    let rows = api.get("/runs?status=blocked").json();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(rows[0]["supervisor"], "live");
    let j = b.journal();
    assert_eq!(j.iter().filter(|r| r["kind"] == "run" && r["event"] == "blocked").count(), 1, "journaled once");
    // Retry of a task that is not halted is a 409, journaled.
    let r = post(&api, &format!("/runs/{run}/tasks/Z/retry"), &serde_json::json!({}));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("has not run"), "{}", r.text());
    // The CLI's retry re-dispatches A; the run goes on through wave 2 to its end.
    let (code, out, err) = cli(&b.home(), &["retry", &run, "A", "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{out}{err}");
    b.wait_state("Z", "committed", T);
    sup.wait_exit(T);
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!(v["status"], "finished", "{v}");
    assert_eq!(v["blocked_by"].as_array().map(Vec::len), Some(0));
    let retries = b.controls("retry");
    assert_eq!(retries.iter().map(|r| r["outcome"].as_str().unwrap()).collect::<Vec<_>>(), vec!["refused", "accepted"]);
    assert_eq!(b.records().len(), 3, "A failed, A retried, Z");
    assert_eq!(b.commits_of("A"), 1);
}

#[test]
fn skip_lets_the_run_finish_with_the_task_counted_and_its_work_kept() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"skp","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt] [fake-claude:error]"},
        {"id":"Z","wave":2,"adapter":"claude","prompt":"z [fake-write:z.txt]"}]}"#;
    let mut sup = b.start_supervised(plan, "success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    wait_status(&api, &run, "blocked");
    let r = post(&api, &format!("/runs/{run}/tasks/A/skip"), &serde_json::json!({}));
    assert_eq!(r.status, 400, "a reason is required: {}", r.text());
    assert!(r.text().contains("field reason is required"), "{}", r.text());
    let r = post(
        &api,
        &format!("/runs/{run}/tasks/A/skip"),
        &serde_json::json!({"reason":"the API is down; not needed today","by":"ops"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    b.wait_state("Z", "committed", T);
    sup.wait_exit(T);
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!((v["status"].as_str(), v["counts"]["skipped"].as_u64()), (Some("finished"), Some(1)), "{v}");
    let a = &b.view()["tasks"]["A"];
    assert_eq!(a["state"], "skipped");
    assert_eq!(a["detail"], "skipped by ops: the API is down; not needed today");
    // A skipped task is done: steer and retry are refused like a committed one's.
    let (code, _, err) = cli(&b.home(), &["journal", "show", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(b.commits_of("A"), 0, "nothing of A was committed");
}

#[test]
fn stop_ends_a_run_stopped_and_ctrl_c_of_a_foreground_run_leaves_no_process_worktree_or_shell_noise() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"stp","max_parallel":2,"tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"},
        {"id":"B","wave":1,"adapter":"claude","prompt":"b"}]}"#;
    let mut sup = b.start_supervised(plan, "hang", &[]);
    wait_for(T, || (b.records().len() >= 2).then_some(())).expect("both turns running");
    // SAFETY: signalling our own child (Ctrl-C sends SIGINT to the foreground process).
    unsafe { libc::kill(sup.child.id() as i32, libc::SIGINT) };
    assert_eq!(sup.wait_exit(T), 0);
    let v = b.view();
    assert_eq!(v["status"], "stopped", "{v}");
    for t in ["A", "B"] {
        assert_eq!(v["tasks"][t]["state"], "halted", "{v}");
        assert!(v["tasks"][t]["detail"].as_str().unwrap().contains("stopped by signal"), "{v}");
    }
    assert!(processes_with_home(&b.home()).is_empty(), "processes left: {:?}", processes_with_home(&b.home()));
    let wts = b.home().join("worktrees").join(b.run_id());
    let left: Vec<_> =
        std::fs::read_dir(&wts).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "worktrees left: {left:?}");
    let log = b.supervisor_log();
    assert!(!log.contains("No such file or directory") && !log.contains("_lib.sh"), "shell noise: {log}");
    // The stop verb ends a run the same way.
    let b = Bench::new();
    let mut sup = b.start_supervised(plan, "hang", &[]);
    wait_for(T, || (b.records().len() >= 2).then_some(())).expect("both turns running");
    let r = control(&b.sock(), &serde_json::json!({"verb":"stop","by":"tester"}));
    assert!(r["detail"].as_str().unwrap().contains("ends stopped"), "{r}");
    sup.wait_exit(T);
    assert_eq!(b.view()["status"], "stopped");
}

#[test]
fn a_run_whose_supervisor_is_gone_says_so_and_stop_ends_it() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"gone","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let mut sup = b.start_supervised(plan, "hang", &[]);
    wait_for(T, || (!b.records().is_empty()).then_some(())).expect("the turn runs");
    sup.child.kill().unwrap(); // a crash: no stop, no journal record
    sup.child.wait().unwrap();
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!((v["status"].as_str(), v["supervisor"].as_str()), (Some("running"), Some("gone")), "{v}");
    let rows = api.get("/runs").json();
    assert_eq!(rows[0]["supervisor"], "gone");
    let (code, out, err) = cli(&b.home(), &["runs", "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("GONE"), "{out}");
    assert!(err.contains(&format!("`harness debug supervise {run}`")), "the command that recovers it: {err}");
    let (code, out, err) = cli(&b.home(), &["top", "--once", "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("supervisor gone: harness debug supervise {run}")), "{out}");
    // harness stop ends it in the journal and cleans up what the dead supervisor left.
    let (code, out, err) = cli(&b.home(), &["stop", &run]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("stopped"), "{out}");
    let v = b.view();
    assert_eq!(v["status"], "stopped", "{v}");
    assert_eq!(v["tasks"]["A"]["state"], "halted");
    let left: Vec<u32> = processes_with_home(&b.home()).into_iter().filter(|p| *p != api.proc.child.id()).collect();
    assert!(left.is_empty(), "the orphaned turn was killed: {left:?}");
    let v = api.get(&format!("/runs/{run}")).json();
    assert_eq!(v["supervisor"], "none", "{v}");
    // A second stop (a script's, a retry's): nothing to do, said, exit 0; the journal unchanged.
    let before = b.journal().len();
    let (code, out, err) = cli(&b.home(), &["stop", &run]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("already stopped; nothing to do"), "{out}");
    assert_eq!(b.journal().len(), before);
}

#[test]
fn a_run_is_named_by_its_slug_a_prefix_or_its_plan_and_an_ambiguous_name_lists_the_candidates() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"refs","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let p = b.plan(plan);
    let run = |args: &[&str], dir: &std::path::Path| {
        let out = b.harness("success").current_dir(dir).arg("run").args(args).arg(&p).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[], &b.repo());
    let first = b.run_id();
    run(&["--slug", "hot"], &b.repo());
    let other = b.dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    git_repo(&other);
    run(&[], &other);
    let show = |reference: &str, dir: &std::path::Path| {
        let out = harness(&b.home()).current_dir(dir).args(["journal", "show", reference]).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A slug two repos share: the current repository's run; from elsewhere, ambiguous.
    let (code, out, err) = show("refs", &b.repo());
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"status\""), "{out}");
    // The plan ran again here (as `hot`): the slug still names its own run, and says which is newest.
    assert!(err.contains("its newest run is") && err.contains("`hot`"), "{err}");
    let (code, _, err) = show("refs", b.dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("names more than one run") && err.contains(&first), "{err}");
    // A unique prefix of the runId.
    let (code, _, err) = show(&first[..first.len() - 2], b.dir.path());
    assert_eq!(code, Some(0), "{err}");
    // The plan's slug, when no run has it as its own, names the newest run of the plan.
    let nightly =
        b.plan(r#"{"v":"plan/v1","slug":"nightly","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#);
    for s in ["n1", "n2"] {
        let out = b.harness("success").args(["run", "--slug", s]).arg(&nightly).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, out, err) = show("nightly", &b.repo());
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("runstate/n2.logs/"), "nightly names n2, the newest: {out}");
    let (code, _, err) = show("nothing-like-it", b.dir.path());
    assert_eq!(code, Some(2));
    assert!(err.contains("no run matches"), "{err}");
}

#[test]
fn a_steer_sent_while_a_kill_waits_out_its_grace_is_refused_and_the_task_stays_halted() {
    let b = Bench::new();
    let stubborn = b.dir.path().join("stubborn-claude");
    std::fs::write(
        &stubborn,
        "#!/bin/bash\n[ \"$1\" = --version ] && { echo 1.0; exit 0; }\ntrap '' TERM\necho '{\"type\":\"system\",\"subtype\":\"init\"}'\nsleep 30\n",
    )
    .unwrap();
    std::fs::set_permissions(&stubborn, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plan = r#"{"v":"plan/v1","slug":"kw","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let mut sup =
        b.start_supervised_with(plan, "success", &[], &[("HARNESS_CLAUDE_BIN", stubborn.display().to_string())]);
    wait_for(T, || (b.state("A").as_deref() == Some("leased")).then_some(())).expect("leased");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let sock = b.sock();
    let killer =
        std::thread::spawn(move || control(&sock, &serde_json::json!({"verb":"kill","task":"A","by":"killer"})));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = control(&b.sock(), &serde_json::json!({"verb":"steer","task":"A","msg":"one more thing"}));
    assert_eq!((r["ok"].as_bool(), r["status"].as_u64()), (Some(false), Some(409)), "{r}");
    assert!(r["detail"].as_str().unwrap().contains("is being killed"), "{r}");
    let k = killer.join().unwrap();
    assert_eq!(k["state"], "halted", "{k}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(b.state("A").as_deref(), Some("halted"), "the task was not dispatched again");
    control(&b.sock(), &serde_json::json!({"verb":"stop"}));
    sup.wait_exit(T);
}

#[test]
fn a_persons_command_warns_in_one_plain_line_and_v_or_rust_log_keep_the_log_format() {
    let b = Bench::new();
    // A gate that fails leaves the task's work unintegrated: the run's end keeps it, with a warning.
    let plan = b.plan(
        r#"{"v":"plan/v1","slug":"warn","tasks":[{"id":"g","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]","gate":"false"}]}"#,
    );
    let stderr = |slug: &str, args: &[&str], rust_log: Option<&str>| {
        let mut c = b.harness("success");
        c.env_remove("RUST_LOG").arg("run").arg(&plan).args(["--slug", slug]).args(args);
        if let Some(l) = rust_log {
            c.env("RUST_LOG", l);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "the run fails");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let kept = "kept: task g is not integrated and holds 1 uncommitted path(s)";
    let err = stderr("warn", &[], None);
    assert!(err.contains(&format!("harness: warning: {kept}")), "{err}");
    assert!(err.lines().all(|l| l.starts_with("harness: ")), "a line in tracing's format:\n{err}");
    assert!(!err.contains("RUN_ID") && !err.contains("WARN"), "{err}");
    // -v and RUST_LOG: the log as before (time, level, message, fields).
    for (slug, args, rust_log) in [("warn-v", &["-v"][..], None), ("warn-env", &[][..], Some("warn"))] {
        let err = stderr(slug, args, rust_log);
        let line = err.lines().find(|l| l.contains(kept)).unwrap_or_else(|| panic!("{slug}: {err}"));
        assert!(line.contains(" WARN ") && line.contains("RUN_ID="), "{slug}: {line}");
    }
}

#[test]
fn stop_json_prints_one_json_answer_on_every_path() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"gone-json","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let mut sup = b.start_supervised(plan, "hang", &[]);
    wait_for(T, || (!b.records().is_empty()).then_some(())).expect("the turn runs");
    sup.child.kill().unwrap(); // a crash: the next stop finds no supervisor
    sup.child.wait().unwrap();
    let run = b.run_id();
    let json = |out: &str| -> serde_json::Value {
        serde_json::from_str(out).unwrap_or_else(|e| panic!("not one JSON value ({e}): {out}"))
    };
    // Its supervisor gone: stopped here, said as a supervisor's stop answer is.
    let (code, out, err) = cli(&b.home(), &["stop", &run, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("its supervisor was gone; stopped it here"), "{v}");
    assert_eq!(b.view()["status"], "stopped");
    // Over already: nothing to do, in JSON too.
    let (code, out, err) = cli(&b.home(), &["stop", &run, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(
        (v["ok"].as_bool(), v["detail"].as_str()),
        (Some(true), Some(&*format!("run {run}: already stopped; nothing to do"))),
        "{v}"
    );
}

#[test]
fn show_says_what_a_task_is_doing_and_an_interrupted_attempt_reads_interrupted() {
    // A gate running: `show RUN` and `top --once` say so, as `show RUN TASK` does.
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"gating","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a","gate":"sleep 30"}]}"#;
    let _sup = b.start_supervised(plan, "success", &[]);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let at = format!("127.0.0.1:{}", api.port);
    wait_for(T, || {
        (api.get(&format!("/runs/{run}")).json()["plan"]["waves"][0]["tasks"][0]["live_state"] == "gating")
            .then_some(())
    })
    .expect("the gate runs");
    for args in [&["show", &run][..], &["show", &run, "A"], &["top", "--once"]] {
        let (code, out, err) = cli(&b.home(), &[args, &["--api", &at]].concat());
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains("running gate"), "{args:?}: {out}");
    }
    assert_eq!(cli(&b.home(), &["stop", &run]).0, 0);
    // A turn a steer interrupted: its attempt reads `interrupted` in `show`, as in the progress lines.
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"steered","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let mut sup = b.start_supervised(plan, "hang,success", &[]);
    wait_for(T, || (!b.records().is_empty()).then_some(())).expect("the turn runs");
    let r = control(&b.sock(), &serde_json::json!({"verb":"steer","task":"A","msg":"do X","interrupt":true}));
    assert_eq!(r["ok"], true, "{r}");
    b.wait_state("A", "committed", T);
    sup.wait_exit(T);
    let api = ApiProc::start(&b.home(), &[]);
    let (code, out, err) = cli(&b.home(), &["show", &b.run_id(), "A", "--api", &format!("127.0.0.1:{}", api.port)]);
    assert_eq!(code, 0, "{err}");
    let attempts: Vec<&str> = out.lines().skip_while(|l| l.trim() != "attempts").skip(1).take(2).collect();
    assert!(attempts.len() == 2 && attempts[0].contains("interrupted") && !attempts[0].contains("failed"), "{out}");
    assert!(attempts[1].contains("done"), "{out}");
}
