//! The typed control protocol against its spec, and the errors a user sees naming what they are
//! about (the operation and the path or id), through the real binary.

use crate::common::*;
use harness::control::{Answer, Reply, Request};

/// The lines of the `jsonl` code blocks under "## Examples" in spec/CONTROL.md: (requests, replies).
fn spec_examples() -> (Vec<String>, Vec<String>) {
    let spec = std::fs::read_to_string(repo_dir().join("spec/CONTROL.md")).unwrap();
    let section = spec.split("## Examples").nth(1).expect("spec/CONTROL.md has an Examples section");
    let section = section.split("\n## ").next().unwrap();
    let blocks: Vec<Vec<String>> = section
        .split("```jsonl\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().lines().map(str::to_string).collect())
        .collect();
    assert_eq!(blocks.len(), 2, "one block of requests, one of replies");
    (blocks[0].clone(), blocks[1].clone())
}

#[test]
fn the_specs_examples_round_trip_byte_for_byte() {
    let (requests, replies) = spec_examples();
    assert!(requests.len() >= 6 && replies.len() >= 6);
    for line in &requests {
        let r: Request = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(&serde_json::to_string(&r).unwrap(), line, "request changed on the way through");
    }
    for line in &replies {
        let r: Reply = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(&serde_json::to_string(&r).unwrap(), line, "reply changed on the way through");
    }
    // Each reply reads as the variant its verb answers with.
    let kinds: Vec<&str> = replies
        .iter()
        .map(|l| match serde_json::from_str::<Reply>(l).unwrap() {
            Reply::Refused(_) => "refused",
            Reply::Done(Answer::Status { .. }) => "status",
            Reply::Done(Answer::Kill { .. }) => "kill",
            Reply::Done(Answer::Steer { .. }) => "steer",
            Reply::Done(Answer::Pause { .. }) => "pause",
            Reply::Done(Answer::Stop { .. }) => "stop",
            Reply::Done(Answer::Interrupt { .. }) => "interrupt",
            Reply::Done(Answer::Ask { .. }) => "ask",
            Reply::Done(Answer::Decide { .. }) => "decide",
            Reply::Done(Answer::Budget { .. }) => "budget",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "status",
            "kill",
            "kill",
            "steer",
            "steer",
            "interrupt",
            "ask",
            "decide",
            "budget",
            "pause",
            "stop",
            "refused",
            "refused"
        ]
    );
}

#[test]
fn a_request_with_a_field_its_verb_does_not_take_or_an_unknown_verb_is_refused_naming_it() {
    let bad = |line: &str| serde_json::from_str::<Request>(line).unwrap_err().to_string();
    assert!(bad(r#"{"verb":"kill","task":"T1","msg":"x"}"#).contains("field msg does not apply to kill"));
    assert!(bad(r#"{"verb":"explode"}"#).contains("unknown verb \"explode\""));
    assert!(bad(r#"{"verb":"kill"}"#).contains("kill needs a task"));
    assert!(bad(r#"{"verb":"steer","task":"../x","msg":"m"}"#).contains("../x"));
    assert!(bad(r#"{"verb":"status","color":"red"}"#).contains("unknown field `color`"));
}

/// Errors name the operation and the id or path involved — never a bare `os error N`.
#[test]
fn cli_errors_name_the_operation_and_the_id_or_path() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    // 1. A run id that parses but is not registered.
    let (code, _, err) = cli(home.path(), &["journal", "show", "0123456789ab--nowhere"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading run 0123456789ab--nowhere's pointer") && err.contains("not in the registry"),
        "{err}"
    );
    // 2. A token file others can read: the API names the file and the fix.
    let tok = home.path().join("api.token");
    std::fs::write(&tok, "secret\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = cli(home.path(), &["api", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{} is mode 644", tok.display())) && err.contains("chmod 600"), "{err}");
    std::fs::remove_file(&tok).unwrap();
    // 3. A supervisor whose plan copy is gone names the run and the plan copy's path.
    let run = run_id_of(&ids, "midwave");
    let plan = home.path().join("fixture-repos/midwave/runstate/payments.plan.json");
    std::fs::remove_file(&plan).unwrap();
    let (code, _, err) = cli(home.path(), &["supervise", &run]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("supervising run {run}")) && err.contains(&plan.display().to_string()), "{err}");
    // 4. The DynWF inbox unreadable (a directory in its place): the operation, the run and the path.
    let dynwf = run_id_of(&ids, "dynwf");
    let (_, pointer, _) = cli(home.path(), &["registry", "list"]);
    let list: serde_json::Value = serde_json::from_str(&pointer).unwrap();
    let p = list.as_array().unwrap().iter().find(|p| p["runId"] == dynwf.as_str()).unwrap();
    let inbox = std::path::Path::new(p["runstateDir"].as_str().unwrap())
        .join(format!("{}.steer.jsonl", p["slug"].as_str().unwrap()));
    let _ = std::fs::remove_file(&inbox);
    std::fs::create_dir_all(&inbox).unwrap();
    let (code, _, err) = cli(home.path(), &["inbox", "take", &dynwf]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("taking run {dynwf}'s inbox")) && err.contains(&inbox.display().to_string()),
        "{err}"
    );
    for line in err.lines() {
        let bare =
            line.trim_start_matches("harness: ").starts_with("No such file") || line.trim().starts_with("os error");
        assert!(!bare, "a bare OS error: {line}");
    }
}
