//! `harness install` / `uninstall`: renders the systemd user units from `units/` with this binary's
//! absolute path and the harness home, writes them to the user's unit directory, and reloads the user
//! manager when one answers (on macOS: the launchd agent plist). It starts nothing: it prints the one
//! command that does.

use crate::os::home::Home;
use std::path::{Path, PathBuf};

/// The unit files, embedded so an installed binary can render them.
pub const UNITS: [(&str, &str); 4] = [
    ("harness-api.socket", include_str!("../../units/harness-api.socket")),
    ("harness-api.service", include_str!("../../units/harness-api.service")),
    ("harness-supervisor@.socket", include_str!("../../units/harness-supervisor@.socket")),
    ("harness-supervisor@.service", include_str!("../../units/harness-supervisor@.service")),
];

/// Fills in `@BIN@`, `@HOME@` and `@DOCS@`.
pub fn render(text: &str, bin: &Path, home: &Path, docs: &Path) -> String {
    text.replace("@BIN@", &bin.display().to_string())
        .replace("@HOME@", &home.display().to_string())
        .replace("@DOCS@", &docs.display().to_string())
}

/// The user unit directory: `$XDG_CONFIG_HOME/systemd/user` or `~/.config/systemd/user`.
pub fn user_unit_dir() -> Result<PathBuf, String> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("systemd/user"));
    }
    let h = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or("HOME is not set")?;
    Ok(PathBuf::from(h).join(".config/systemd/user"))
}

fn docs_dir() -> PathBuf {
    crate::wrapper::wrappers_dir()
        .ok()
        .and_then(|w| w.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/usr/share/doc/harness"))
}

/// True when a systemd user manager answers.
pub fn user_manager_answers() -> bool {
    systemctl_user_quiet(&["show-environment"])
}

/// `systemctl --user ARGS` with its output discarded: true when it ran and succeeded.
pub fn systemctl_user_quiet(args: &[&str]) -> bool {
    std::process::Command::new("systemctl")
        .arg("--user")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Renders every unit; returns (file name, text).
pub fn rendered(bin: &Path, home: &Home) -> Vec<(String, String)> {
    let root = home.root.canonicalize().unwrap_or_else(|_| home.root.clone());
    UNITS.iter().map(|(name, text)| (name.to_string(), render(text, bin, &root, &docs_dir()))).collect()
}

/// Writes the units (or prints them) and reloads the manager. Returns what to tell the user.
pub fn install(bin: &Path, home: &Home, unit_dir: Option<&Path>, print: bool) -> Result<String, String> {
    if !bin.is_file() {
        return Err(format!("--bin {} is not a file", bin.display()));
    }
    let bin = bin.canonicalize().map_err(|e| format!("{}: {e}", bin.display()))?;
    home.ensure().map_err(|e| e.to_string())?;
    let units = rendered(&bin, home);
    if print {
        for (name, text) in &units {
            crate::term::out(&format!("# --- {name} ---\n{text}"));
        }
        return Ok(String::new());
    }
    #[cfg(target_os = "macos")]
    if unit_dir.is_none() {
        return crate::os::launchd::install_agent(&bin, home);
    }
    let dir = match unit_dir {
        Some(d) => d.to_path_buf(),
        None => user_unit_dir()?,
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, text) in &units {
        let p = dir.join(name);
        crate::os::home::write_atomic(&p, text.as_bytes(), 0o644).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let reload = if unit_dir.is_none() && user_manager_answers() {
        let ok = std::process::Command::new("systemctl")
            .args(["--user", "daemon-reload"])
            .status()
            .is_ok_and(|s| s.success());
        if ok { "systemctl --user daemon-reload done." } else { "systemctl --user daemon-reload failed." }
    } else {
        "no systemd user manager answered: run `systemctl --user daemon-reload` in your session."
    };
    Ok(format!(
        "installed {} units in {} ({reload})\nstart the API with:\n  systemctl --user enable --now harness-api.socket\nits logs:\n  journalctl --user -u harness-api.service",
        units.len(),
        dir.display()
    ))
}

/// Stops and removes what `install` wrote.
pub fn uninstall(unit_dir: Option<&Path>) -> Result<String, String> {
    let dir = match unit_dir {
        Some(d) => d.to_path_buf(),
        None => user_unit_dir()?,
    };
    let live = unit_dir.is_none() && user_manager_answers();
    if live {
        let _ = std::process::Command::new("systemctl")
            .args(["--user", "disable", "--now", "harness-api.socket", "harness-api.service"])
            .stderr(std::process::Stdio::null())
            .status();
    }
    let mut removed = 0;
    for (name, _) in UNITS {
        if std::fs::remove_file(dir.join(name)).is_ok() {
            removed += 1;
        }
    }
    if live {
        let _ = std::process::Command::new("systemctl").args(["--user", "daemon-reload"]).status();
    }
    Ok(format!("removed {removed} unit file(s) from {}", dir.display()))
}
