//! Running a wrapper script per `spec/WRAPPER-CONTRACT.md`: where the scripts are, the argument list
//! for a turn, the process group, and parsing the status line. It decides no policy: what a result
//! means for the task is the supervisor's business.

use crate::engine::Adapter;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The status line every wrapper prints last.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Status {
    pub ok: bool,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub files: Vec<String>,
}

/// What one wrapper run ended with.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The wrapper's exit code; 128+N when it died by signal N.
    pub rc: i32,
    /// The parsed status line, when the wrapper printed one.
    pub status: Option<Status>,
}

impl Outcome {
    /// A one-line reason for a person, from the status line or the exit code.
    pub fn detail(&self) -> String {
        match &self.status {
            Some(s) if !s.detail.is_empty() => s.detail.clone(),
            _ => format!("wrapper exited {} without a status line", self.rc),
        }
    }
}

/// One turn's parameters.
pub struct Turn<'a> {
    pub adapter: Adapter,
    pub prompt_file: &'a Path,
    pub cwd: &'a Path,
    pub log: &'a Path,
    pub timeout_s: u64,
    pub model: Option<&'a str>,
    /// claude only: the uuid assigned before the turn.
    pub session_id: Option<&'a str>,
    pub resume: Option<&'a str>,
    /// claude only: the live channel (a FIFO) the turn reads its input from (`--interactive --input`).
    pub input: Option<&'a Path>,
}

/// The wrapper scripts, embedded: what a binary with no package and no checkout beside it (`cargo
/// install`) writes out once, under `$HARNESS_HOME/share/wrappers-<version>/`.
const EMBEDDED: [(&str, &str, u32); 5] = [
    ("_lib.sh", include_str!("../wrappers/_lib.sh"), 0o600),
    ("na.sh", include_str!("../wrappers/na.sh"), 0o700),
    ("ca.sh", include_str!("../wrappers/ca.sh"), 0o700),
    ("codex.sh", include_str!("../wrappers/codex.sh"), 0o700),
    ("_contract-probe.sh", include_str!("../wrappers/_contract-probe.sh"), 0o700),
];

/// Where this binary's shared files are, without a path baked in at build time: the package's
/// `<exe dir>/../share/harness/<sub>`, else a checkout's `<sub>` (a directory above the binary that
/// holds `Cargo.toml`, as `target/debug/harness` has). The first holding `marker` wins; `Err` lists
/// every place tried.
pub fn shared_dir(sub: &str, marker: &str) -> Result<PathBuf, Vec<PathBuf>> {
    let mut tried = Vec::new();
    let exe = std::env::current_exe().ok().and_then(|e| e.canonicalize().ok());
    let Some(bin) = exe.as_deref().and_then(Path::parent) else { return Err(tried) };
    let mut candidates = vec![bin.join("../share/harness").join(sub)];
    candidates.extend(bin.ancestors().take(4).filter(|a| a.join("Cargo.toml").is_file()).map(|a| a.join(sub)));
    for d in candidates {
        if d.join(marker).is_file() {
            return Ok(d);
        }
        tried.push(d);
    }
    Err(tried)
}

/// The directory holding `na.sh`, `ca.sh`, `codex.sh`: `$HARNESS_WRAPPERS`, else the package's or
/// the checkout's (`shared_dir`), else the embedded copies written under `$HARNESS_HOME`.
pub fn wrappers_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("HARNESS_WRAPPERS").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        return if d.join("na.sh").is_file() {
            Ok(d)
        } else {
            Err(format!("HARNESS_WRAPPERS={} holds no na.sh", d.display()))
        };
    }
    let tried = match shared_dir("wrappers", "na.sh") {
        Ok(d) => return Ok(d),
        Err(t) => t,
    };
    embedded_wrappers().map_err(|e| {
        format!(
            "cannot find the wrapper scripts (tried {}) nor write them out ({e}); set HARNESS_WRAPPERS",
            tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    })
}

/// The embedded wrappers, written (when not already there, in full) to
/// `$HARNESS_HOME/share/wrappers-<version>/`, private to the user.
fn embedded_wrappers() -> Result<PathBuf, String> {
    let home = crate::os::home::Home::from_env().map_err(|e| e.to_string())?;
    let share = home.root.join("share");
    let dir = share.join(format!("wrappers-{}", env!("CARGO_PKG_VERSION")));
    let up_to_date =
        EMBEDDED.iter().all(|(name, text, _)| std::fs::read_to_string(dir.join(name)).is_ok_and(|t| t == *text));
    if up_to_date {
        return Ok(dir);
    }
    for d in [&home.root, &share, &dir] {
        crate::os::home::private_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    for (name, text, mode) in EMBEDDED {
        let p = dir.join(name);
        crate::os::home::write_atomic(&p, text.as_bytes(), mode).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(dir)
}

/// The command for one turn: `<dir>/<wrapper> --prompt-file … --cwd … --log … --timeout …`, stdin
/// closed, leading its own process group, stdout piped (for the status line), stderr inherited.
pub fn command(dir: &Path, t: &Turn) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(dir.join(t.adapter.wrapper()));
    c.arg("--prompt-file")
        .arg(t.prompt_file)
        .arg("--cwd")
        .arg(t.cwd)
        .arg("--log")
        .arg(t.log)
        .arg("--timeout")
        .arg(t.timeout_s.to_string());
    if let Some(m) = t.model {
        c.arg("--model").arg(m);
    }
    if let Some(s) = t.session_id {
        c.arg("--session-id").arg(s);
    }
    if let Some(r) = t.resume {
        c.arg("--resume").arg(r);
    }
    if let Some(i) = t.input {
        c.arg("--interactive").arg("--input").arg(i);
    }
    // The stamper between the engine's stdout and the log (true line times): this binary.
    if let Ok(me) = std::env::current_exe() {
        c.env("HARNESS_STAMP", me);
    }
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(false);
    c
}

/// Parses the last non-empty line of a wrapper's stdout as its status line.
pub fn parse_status(stdout: &[u8]) -> Option<Status> {
    let text = String::from_utf8_lossy(stdout);
    let last = text.lines().rev().find(|l| !l.trim().is_empty())?;
    serde_json::from_str(last).ok()
}

/// Exit code of a finished process: the code, or 128 + signal.
pub fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().or_else(|| st.signal().map(|s| 128 + s)).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_is_the_last_line() {
        let s = parse_status(b"progress\n{\"ok\":true,\"session_id\":\"s\",\"detail\":\"d\",\"files\":[\"a\"]}\n\n")
            .unwrap();
        assert!(s.ok);
        assert_eq!(s.session_id.as_deref(), Some("s"));
        assert_eq!(s.files, vec!["a"]);
        assert!(parse_status(b"no json").is_none());
        let s = parse_status(b"{\"ok\":false,\"detail\":\"x\",\"files\":[]}").unwrap();
        assert_eq!(s.session_id, None);
    }
}
