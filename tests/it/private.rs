//! Private by default: what harness makes under a runstate dir and `$HARNESS_HOME` is its owner's
//! only (files 0600, dirs 0700) whatever the umask, while the files an agent writes in its worktree
//! keep the user's umask; a home, `runs/`, `sock/` or token that is not this user's own is refused
//! with one line naming the path and the fix.

use crate::common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `c` with umask `mask` (the user's: 022 on most boxes).
fn with_umask(c: &mut Command, mask: libc::mode_t) -> &mut Command {
    // SAFETY: umask(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        c.pre_exec(move || {
            libc::umask(mask);
            Ok(())
        })
    }
}

/// Every entry under `root` with a group or other permission bit, as "mode path"; the contents
/// of the dirs in `skip` are not looked at (the dirs themselves are).
fn loose(root: &Path, skip: &[PathBuf], out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(root) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if m.file_type().is_symlink() {
            continue;
        }
        if m.mode() & 0o077 != 0 {
            out.push(format!("{:04o} {}", m.mode() & 0o7777, p.display()));
        }
        if m.is_dir() && !skip.contains(&p) {
            loose(&p, skip, out);
        }
    }
}

#[test]
fn every_file_harness_makes_is_its_owners_only_and_the_agents_files_keep_the_umask() {
    let b = Bench::new();
    // The home and repo as a user's would be on a box with a 0755 $HOME.
    std::fs::set_permissions(b.home(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let plan = r#"{"v":"plan/v1","slug":"modes","max_parallel":2,"setup":"echo setting up",
        "tasks":[
        {"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]","gate":"echo gate ok"},
        {"id":"b","wave":1,"adapter":"claude","prompt":"b [fake-write:b.txt]","gate":"echo gate ok"},
        {"id":"c","wave":1,"adapter":"claude","prompt":"c [fake-write:c.txt] [fake-claude:error]"}]}"#;
    let p = b.plan(plan);
    let mut run = b.harness("success");
    run.arg("run").arg(&p).args(["--supervised", "--foreground"]);
    run.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut sup = Proc { child: with_umask(&mut run, 0o022).spawn().unwrap() };
    // c halts and blocks the run: stopped, its worktree is kept for the operator (its folder is
    // there to be looked at).
    let t = std::time::Duration::from_secs(60);
    wait_for(t, || b.try_run_id()).expect("the run registered");
    b.wait_state("c", "halted", t);
    b.wait_state("a", "committed", t);
    b.wait_state("b", "committed", t);
    let answer = control(&b.sock(), &serde_json::json!({"verb":"stop","by":"tester"}));
    assert_eq!(answer["ok"], true, "{answer}");
    sup.wait_exit(t);
    let run_id = b.run_id();

    // The API's files too: summaries, the overview cache, a /watch checkpoint.
    let mut api = harness(&b.home());
    api.args(["api", "--listen", "127.0.0.1:0"]).stdout(std::process::Stdio::piped());
    let mut child = with_umask(&mut api, 0o022).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let port: u16 = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    let api = Proc { child };
    assert_eq!(http(port, "GET", "/runs", &[], None).status, 200);
    assert_eq!(http(port, "GET", &format!("/runs/{run_id}"), &[], None).status, 200);
    assert_eq!(http(port, "GET", &format!("/runs/{run_id}/tasks/a"), &[], None).status, 200);
    let watch = SseConn::open(port, "/watch?since=now", &[]);
    assert_eq!(watch.status, 200);
    drop(watch);
    drop(api);
    let checkpoints = std::fs::read_dir(b.home().join("watch")).map(|d| d.count()).unwrap_or(0);
    assert!(checkpoints > 0, "a /watch checkpoint was written");

    // The task worktrees' contents are the agent's (and git's): skipped, their folders are not —
    // the halted task's is kept, and `git worktree add` made it under the umask.
    let wt = b.home().join("worktrees").join(&run_id);
    assert!(wt.join("c/c.txt").exists(), "the halted task's worktree is kept");
    let skip: Vec<PathBuf> = ["a", "b", "c"].iter().map(|t| wt.join(t)).collect();
    let mut found = Vec::new();
    loose(&b.home(), &skip, &mut found);
    loose(&b.repo().join("runstate"), &skip, &mut found);
    let runstate = std::fs::metadata(b.repo().join("runstate")).unwrap().mode() & 0o777;
    assert_eq!(runstate, 0o700, "the runstate dir itself");
    assert!(
        found.is_empty(),
        "readable by group or others after a supervised run (umask 022):\n  {}",
        found.join("\n  ")
    );
    // Something was looked at: the logs, prompts and plan copy are there.
    for f in ["modes.logs/a.log", "modes.logs/a.log.stderr", "modes.prompts/a.1.txt", "modes.plan.json"] {
        assert!(b.repo().join("runstate").join(f).exists(), "{f} missing");
    }
    // What the agent wrote keeps the user's umask (022: 0644), in its worktree as in the checkout
    // the run integrated it into.
    let wrote: Vec<PathBuf> =
        [wt.join("a/a.txt"), b.repo().join("a.txt"), wt.join("c/c.txt")].into_iter().filter(|p| p.exists()).collect();
    assert!(wrote.len() >= 2, "the agent's a.txt is nowhere: {wrote:?}");
    for f in wrote {
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o644, "{}", f.display());
    }
}

/// `harness run` in `home` (made as the test says): its exit code and stderr.
fn run_in(b: &Bench) -> (i32, String) {
    let plan = r#"{"v":"plan/v1","slug":"owned","tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let out = b.harness("success").arg("run").arg(b.plan(plan)).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_home_others_can_write_is_refused_naming_the_path_and_the_fix() {
    let b = Bench::new();
    std::fs::set_permissions(b.home(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = run_in(&b);
    assert_eq!(code, 1, "{err}");
    let home = b.home().display().to_string();
    assert!(err.contains(&home) && err.contains("writable by group or others") && err.contains("chmod 700"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(b.try_run_id().is_none(), "nothing registered");
    assert!(!b.repo().join("runstate").exists(), "nothing written in the checkout");

    // The same for sock/ and runs/, and a sock/ that is a link to elsewhere.
    std::fs::set_permissions(b.home(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(b.home().join("runs")).unwrap();
    std::fs::set_permissions(b.home().join("runs"), std::fs::Permissions::from_mode(0o733)).unwrap();
    let (code, err) = run_in(&b);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("{home}/runs")) && err.contains("writable by group or others"), "{err}");
    std::fs::set_permissions(b.home().join("runs"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let elsewhere = b.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, b.home().join("sock")).unwrap();
    let (code, err) = run_in(&b);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("{home}/sock")) && err.contains("symbolic link"), "{err}");
    std::fs::remove_file(b.home().join("sock")).unwrap();
    let (code, err) = run_in(&b);
    assert_eq!(code, 0, "a home of the user's own runs: {err}");
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn a_home_or_token_of_another_uid_or_a_linked_token_is_refused() {
    let b = Bench::new();
    let home = b.home().display().to_string();
    if is_root() {
        // Another user made the home first (as under /tmp): refused, nothing planted is used.
        nix::unistd::chown(&b.home(), Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let (code, err) = run_in(&b);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(&home) && err.contains("owned by uid 65534"), "{err}");
        let (code, _, err) = cli(&b.home(), &["api", "--listen", "127.0.0.1:0"]);
        assert_eq!(code, 1, "the API refuses it too: {err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
        nix::unistd::chown(&b.home(), Some(nix::unistd::geteuid()), None).unwrap();

        // A runstate dir another user made in a shared checkout: its plan copy is not ours to run.
        std::fs::create_dir(b.repo().join("runstate")).unwrap();
        nix::unistd::chown(&b.repo().join("runstate"), Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let (code, err) = run_in(&b);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("runstate") && err.contains("owned by uid 65534"), "{err}");
        std::fs::remove_dir(b.repo().join("runstate")).unwrap();

        // A token file another uid owns (mode 0600, so only its owner's words are in it).
        let token = b.home().join("api.token");
        std::fs::write(&token, "planted\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        nix::unistd::chown(&token, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let (code, out, err) = cli(&b.home(), &["token"]);
        assert_ne!(code, 0, "{out}");
        assert!(err.contains("owned by uid 65534") && err.contains("api.token"), "{err}");
        assert!(!out.contains("planted"));
        std::fs::remove_file(&token).unwrap();
    } else {
        eprintln!("not root: the other-uid cases are skipped (CI runs them)");
    }
    // A token that is a link (to a file of the user's: O_NOFOLLOW still refuses it).
    let target = b.dir.path().join("some-file");
    std::fs::write(&target, "secret-elsewhere\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&target, b.home().join("api.token")).unwrap();
    let (code, out, err) = cli(&b.home(), &["token"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("symbolic link") && err.contains("api.token"), "{err}");
    assert!(!out.contains("secret-elsewhere"));
    let mut api = harness(&b.home());
    let out = api.args(["api", "--listen", "127.0.0.1:0"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
}

/// harness's own secrets (the API token, the NATS credentials) stay out of `setup` and the gates,
/// which run code the agent may have written; the user's environment otherwise reaches them (a
/// gate needs its toolchain).
#[test]
fn setup_and_gates_get_the_users_environment_without_harness_secrets() {
    let b = Bench::new();
    let out = b.dir.path().join("env");
    std::fs::create_dir(&out).unwrap();
    let plan = serde_json::json!({"v":"plan/v1","slug":"envs","setup":format!("printenv > {}/setup.env", out.display()),
        "tasks":[{"id":"a","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt]",
                  "gate":format!("printenv > {}/gate.env", out.display())}]});
    let secrets = [
        "HARNESS_API_TOKEN",
        "HARNESS_NATS_PASSWORD",
        "HARNESS_NATS_TOKEN",
        "HARNESS_NATS_NKEY",
        "HARNESS_NATS_CREDS",
        "HARNESS_NATS_USER",
        "HARNESS_NATS_KEY",
    ];
    let mut run = b.harness("success");
    run.arg("run").arg(b.plan(&plan.to_string())).args(["--supervised", "--foreground"]);
    for k in secrets {
        run.env(k, format!("secret-value-of-{k}"));
    }
    run.env("MY_TOOLCHAIN_HOME", "/opt/toolchain-kept");
    let done = run.output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(b.state("a").as_deref(), Some("committed"), "{:#}", b.view()["tasks"]);
    for step in ["setup", "gate"] {
        let env = std::fs::read_to_string(out.join(format!("{step}.env"))).unwrap();
        for k in secrets {
            assert!(!env.contains(k) && !env.contains("secret-value-of"), "{step} got {k}:\n{env}");
        }
        assert!(env.contains("MY_TOOLCHAIN_HOME=/opt/toolchain-kept"), "{step} lost the user's environment:\n{env}");
        assert!(env.contains("HARNESS_TASK=a") && env.contains("PATH="), "{step}:\n{env}");
    }
}

/// While a task runs, no process the supervisor started — the wrapper (the engine's parent, whose
/// `/proc/<pid>/environ` an agent can read), the engine — holds harness's secrets, though the
/// supervisor was started with them.
#[test]
fn no_process_under_the_supervisor_holds_harness_secrets() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"held","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let env = [
        ("HARNESS_API_TOKEN", "api-secret-under-the-supervisor".to_string()),
        ("HARNESS_NATS_PASSWORD", "nats-secret-under-the-supervisor".to_string()),
    ];
    let sup = b.start_supervised_with(plan, "hang", &[], &env);
    b.wait_state("A", "leased", std::time::Duration::from_secs(30));
    // The task's engine is up (its log has its first line) before the look.
    let log = b.repo().join("runstate/held.logs/A.log");
    wait_for(std::time::Duration::from_secs(30), || std::fs::metadata(&log).is_ok_and(|m| m.len() > 0).then_some(()))
        .expect("the engine started");
    let supervisor = sup.child.id();
    for (k, v) in &env {
        let holders: Vec<u32> =
            processes_with_env(&format!("{k}={v}")).into_iter().filter(|p| *p != supervisor).collect();
        let described: Vec<String> = holders
            .iter()
            .map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " "))
            .collect();
        assert!(holders.is_empty(), "{k} is in the environment of {described:?}");
    }
}
