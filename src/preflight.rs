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
    // Setup runs in each fresh task worktree; a shared run has none.
    let setup = plan.setup.as_ref().filter(|_| plan.isolation() == crate::state::plan::Isolation::Worktree);
    if let Some(setup) = setup {
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
    use std::os::unix::process::CommandExt;
    let bin = resolve(adapter)?;
    // Its own process group (whatever it starts dies with it) and stderr to a file, so a child left
    // holding the stream cannot keep this waiting.
    let err = tempfile_for_stderr().map_err(|e| format!("cannot check {}: {e}", bin.display()))?;
    let mut child = Command::new(&bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err.try_clone().map_err(|e| e.to_string())?)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{} --version did not start: {e}", bin.display()))?;
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let end = Instant::now() + VERSION_ANSWER;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                break Err(format!("{} --version gave no answer within {} s", bin.display(), VERSION_ANSWER.as_secs()));
            }
            Err(e) => break Err(format!("{} --version: {e}", bin.display())),
        }
    };
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    let s = status?;
    if s.success() {
        return Ok(());
    }
    let mut text = String::new();
    // The child shared this file's offset: read from the start.
    let _ = std::io::Seek::seek(&mut &err, std::io::SeekFrom::Start(0));
    let _ = std::io::Read::read_to_string(&mut std::io::Read::take(&err, 64 * 1024), &mut text);
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let last: String = last.chars().filter(|c| !c.is_control()).take(200).collect();
    let said = if last.is_empty() { String::new() } else { format!(": {last}") };
    Err(format!("{} --version failed ({s}){said}", bin.display()))
}

/// An unnamed file for a child's stderr (removed as soon as it is open).
fn tempfile_for_stderr() -> std::io::Result<std::fs::File> {
    let path = std::env::temp_dir().join(format!("harness-preflight-{}", uuid::Uuid::new_v4()));
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(f)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn on_path(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| is_executable(p))
}

/// The programs a shell command line starts that PATH must provide: the first word of each simple
/// command (past variable assignments, redirections, keywords and `command`/`env`/`exec`…),
/// quotes and comments honoured. Left alone: words the shell expands or quotes, relative paths (an
/// earlier command may make them, or a `cd` move them), the script's own functions, and all after
/// a here-document.
fn programs_of(command: &str) -> Vec<String> {
    let segments = segments(command);
    let functions: Vec<String> = segments
        .iter()
        .flat_map(|s| {
            s.windows(2).filter_map(|w| match (w[0].as_str(), w[1].as_str()) {
                ("function", name) => Some(name.trim_end_matches("()").to_string()),
                (name, "()") => Some(name.to_string()),
                _ => None,
            })
        })
        .chain(segments.iter().flatten().filter_map(|w| w.strip_suffix("()").map(str::to_string)))
        .collect();
    let mut out: Vec<String> = Vec::new();
    for words in &segments {
        let Some(w) = first_program(words) else { continue };
        let quoted_or_expanded = w.contains(['$', '`', '"', '\'', '*', '?', '~', '[', '\\']);
        let relative = w.contains('/') && !w.starts_with('/');
        if !quoted_or_expanded
            && !relative
            && !w.contains("()")
            && !functions.contains(w)
            && !out.iter().any(|o| o == w)
        {
            out.push(w.clone());
        }
    }
    out
}

/// The command's simple commands, each as its words (quotes kept, comments dropped); nothing after a
/// here-document.
fn segments(command: &str) -> Vec<Vec<String>> {
    let (mut segs, mut words, mut word) = (Vec::new(), Vec::new(), String::new());
    let mut chars = command.chars().peekable();
    let mut quote: Option<char> = None;
    let end_word = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                word.push(c);
            }
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.push(c);
            }
            (None, '\\') => {
                word.push(c);
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            (None, '#') if word.is_empty() => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
                end_word(&mut word, &mut words);
                segs.push(std::mem::take(&mut words));
            }
            (None, '<') if chars.peek() == Some(&'<') => break,
            (None, ';' | '&' | '|' | '\n' | '(' | ')' | '{' | '}') => {
                // `>&2`, `2>&1`, `&>log`: a redirection, not a separator.
                if c == '&' && (word.ends_with(['>', '<']) || chars.peek() == Some(&'>')) {
                    word.push(c);
                    continue;
                }
                if c == '(' && chars.peek() == Some(&')') {
                    chars.next();
                    end_word(&mut word, &mut words);
                    words.push("()".into());
                    continue;
                }
                end_word(&mut word, &mut words);
                segs.push(std::mem::take(&mut words));
            }
            (None, c) if c.is_whitespace() => end_word(&mut word, &mut words),
            (None, c) => word.push(c),
        }
    }
    end_word(&mut word, &mut words);
    segs.push(words);
    segs.into_iter().filter(|s| !s.is_empty()).collect()
}

/// The program a simple command runs, if it names one.
fn first_program(words: &[String]) -> Option<&String> {
    if matches!(words.first().map(String::as_str), Some("for" | "case" | "select" | "function")) {
        return None;
    }
    let keyword = |w: &str| {
        matches!(
            w,
            "if" | "then" | "else" | "elif" | "fi" | "do" | "done" | "while" | "until" | "esac" | "!" | "time" | "()"
        )
    };
    let assignment = |w: &str| w.contains('=') && !w.starts_with('=') && !w.starts_with('-');
    let redirection = |w: &str| w.contains(['<', '>']);
    let wrapper = |w: &str| matches!(w, "command" | "builtin" | "exec" | "env" | "nohup" | "nice" | "sudo");
    let mut rest = words.iter().filter(|w| !redirection(w)).skip_while(|w| keyword(w) || assignment(w));
    let mut w = rest.next()?;
    while wrapper(w) {
        // `command -v x`, `env -i FOO=1 make`: the wrapper's flags and assignments, then the program.
        if w == "command" && rest.clone().next().is_some_and(|n| n == "-v" || n == "-V") {
            return None;
        }
        w = rest.find(|n| !n.starts_with('-') && !assignment(n))?;
    }
    Some(w)
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
        assert_eq!(
            programs_of("FOO=1 make -j4 | tee log; ./scripts/x.sh; /usr/bin/env"),
            vec!["make", "tee", "/usr/bin/env"]
        );
        assert_eq!(programs_of("if true; then \"$X\"; fi"), vec!["true"]);
        assert_eq!(programs_of("for f in a b; do echo $f; done"), vec!["echo"]);
        assert_eq!(programs_of("echo npm is missing >&2; exit 7"), vec!["echo", "exit"]);
        assert_eq!(programs_of("make 2>&1 >log & wait"), vec!["make", "wait"]);
        assert_eq!(programs_of(">out cat in"), vec!["cat"]);
        // What real setups say, and must not be refused for.
        assert_eq!(programs_of("if ! command -v jq >/dev/null; then echo no jq; fi"), vec!["echo"]);
        assert_eq!(programs_of("git commit -m \"fix; update docs\" || true"), vec!["git", "true"]);
        assert_eq!(programs_of("f() { echo hi; }; f"), vec!["echo"]);
        assert_eq!(programs_of("make # build && deploy"), vec!["make"]);
        assert_eq!(programs_of("python3 -m venv .venv && .venv/bin/pip install -r req.txt"), vec!["python3"]);
        assert_eq!(programs_of("cd sub && ./build.sh"), vec!["cd"]);
        assert_eq!(programs_of("cat <<EOF > x\nline\nEOF"), vec!["cat"]);
        assert_eq!(programs_of("time make; env FOO=1 npm ci; nohup -n x"), vec!["make", "npm", "x"]);
        assert_eq!(programs_of("[ -f .env ] || cp .env.example .env"), vec!["cp"]);
        assert_eq!(programs_of("source .venv/bin/activate && pip install -r r.txt"), vec!["source", "pip"]);
    }
}
