//! What `harness run` and `harness session start` check before they register anything: every
//! engine the plan uses resolves (its `HARNESS_*_BIN` or PATH) and answers `--version`; the
//! worktree has the plan's `base_branch` checked out when the plan names one; the programs the
//! plan's `setup` command starts exist. Each problem is one line naming the adapter (and its
//! tasks) or the field, and the fix.

use crate::engine::Adapter;
use crate::state::plan::Plan;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long an engine may take to answer `--version` (a node CLI's cold start included).
const VERSION_ANSWER: Duration = Duration::from_secs(20);

/// Every problem found, one line each; empty when the run can start.
pub fn check(plan: &Plan, worktree: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for (adapter, tasks) in engines_of(plan) {
        if let Err(e) = engine_answers(adapter) {
            problems.push(format!("adapter {adapter} (task {}): {e}", tasks.join(", ")));
        }
    }
    if let Some(want) = &plan.base_branch {
        match crate::os::git::branch(worktree) {
            Some(b) if &b == want => {}
            Some(b) => problems.push(format!(
                "base_branch: the plan runs on {want:?} but {} has {b:?} checked out (git switch {want})",
                worktree.display()
            )),
            None => problems.push(format!(
                "base_branch: the plan runs on {want:?} but {} has a detached HEAD (git switch {want})",
                worktree.display()
            )),
        }
    }
    if let Some(setup) = &plan.setup {
        for prog in programs_of(setup) {
            if !shell_knows(&prog, worktree) {
                problems.push(format!(
                    "setup: {prog:?} is not a command here (not on PATH, not a shell builtin): install it or fix the plan's setup"
                ));
            }
        }
    }
    problems
}

/// The engines the plan runs, each with the tasks that use it (the reviewer for `review: true`).
fn engines_of(plan: &Plan) -> BTreeMap<Adapter, Vec<String>> {
    let mut m: BTreeMap<Adapter, Vec<String>> = BTreeMap::new();
    for t in &plan.tasks {
        m.entry(t.adapter).or_default().push(t.id.to_string());
        if t.review {
            m.entry(Adapter::REVIEWER).or_default().push(format!("{}'s review", t.id));
        }
    }
    m
}

/// The engine's binary as its wrapper finds it: the variable's value, else its command on PATH.
fn resolve(adapter: Adapter) -> Result<PathBuf, String> {
    let var = adapter.binary_env();
    let set = std::env::var(var).ok().filter(|v| !v.is_empty());
    let cmd = set.clone().unwrap_or_else(|| adapter.default_binary().to_string());
    let found = if cmd.contains('/') { Some(PathBuf::from(&cmd)).filter(|p| is_executable(p)) } else { on_path(&cmd) };
    found.ok_or_else(|| match set {
        Some(v) => format!("{var}={v} is not an executable file"),
        None => format!("{cmd} not found on PATH: install it, or set {var} to its path"),
    })
}

fn engine_answers(adapter: Adapter) -> Result<(), String> {
    let bin = resolve(adapter)?;
    let mut child = Command::new(&bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{} --version did not start: {e}", bin.display()))?;
    let end = Instant::now() + VERSION_ANSWER;
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
                let last: String = last.chars().take(200).collect();
                return Err(format!(
                    "{} --version failed ({s}){}",
                    bin.display(),
                    if last.is_empty() { String::new() } else { format!(": {last}") }
                ));
            }
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} --version gave no answer within {} s",
                    bin.display(),
                    VERSION_ANSWER.as_secs()
                ));
            }
            Err(e) => return Err(format!("{} --version: {e}", bin.display())),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn on_path(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| is_executable(p))
}

/// The programs a shell command line starts: the first word of each command of its lists and
/// pipelines, past variable assignments; words the shell expands or quotes are left alone.
fn programs_of(command: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // Redirections (`>&2`, `&>log`, `2>&1`) are not separators.
    let unredirected = command.replace(">&", ">").replace("<&", "<").replace("&>", ">");
    let separated = unredirected.replace("&&", ";").replace("||", ";").replace(['|', '&', '\n', '(', ')'], ";");
    for part in separated.split(';') {
        let keyword = |w: &str| {
            matches!(
                w,
                "if" | "then"
                    | "else"
                    | "elif"
                    | "fi"
                    | "for"
                    | "do"
                    | "done"
                    | "while"
                    | "until"
                    | "case"
                    | "esac"
                    | "{"
                    | "}"
                    | "!"
                    | "exec"
                    | "command"
            )
        };
        let assignment = |w: &str| w.contains('=') && !w.starts_with('=');
        let redirection = |w: &str| w.contains(['<', '>']);
        // `for x in …` and `case x in …` name no program.
        if matches!(part.split_whitespace().next(), Some("for" | "case" | "select")) {
            continue;
        }
        let Some(w) = part.split_whitespace().find(|w| !keyword(w) && !assignment(w) && !redirection(w)) else {
            continue;
        };
        let expanded = w.contains(['$', '`', '"', '\'', '*', '?', '~']);
        if !expanded && !out.iter().any(|o| o == w) {
            out.push(w.to_string());
        }
    }
    out
}

/// Whether `sh` in `dir` finds `prog` (a builtin, a function of sh, or a file on PATH or by path).
fn shell_knows(prog: &str, dir: &Path) -> bool {
    Command::new("sh")
        .args(["-c", "command -v -- \"$1\" > /dev/null", "sh", prog])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_of_a_setup_line_are_its_commands_first_words() {
        assert_eq!(programs_of("cp .env.example .env && npm ci"), vec!["cp", "npm"]);
        assert_eq!(programs_of("FOO=1 make -j4 | tee log; ./scripts/x.sh"), vec!["make", "tee", "./scripts/x.sh"]);
        assert_eq!(programs_of("if true; then \"$X\"; fi"), vec!["true"]);
        assert_eq!(programs_of("for f in a b; do echo $f; done"), vec!["echo"]);
        assert_eq!(programs_of("echo npm is missing >&2; exit 7"), vec!["echo", "exit"]);
        assert_eq!(programs_of("make 2>&1 >log & wait"), vec!["make", "wait"]);
        assert_eq!(programs_of(">out cat in"), vec!["cat"]);
    }
}
