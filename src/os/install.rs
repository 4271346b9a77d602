//! `harness install` / `uninstall`: renders the systemd user units from `units/` with this binary's
//! absolute path and the harness home, writes them to the user's unit directory, and reloads the user
//! manager when one answers (on macOS: the launchd agent plist). It starts nothing: it prints the one
//! command that does.

use crate::os::home::Home;
use std::path::{Path, PathBuf};

/// The unit files, embedded so an installed binary can render them.
pub const UNITS: [(&str, &str); 5] = [
    ("harness-api.socket", include_str!("../../units/harness-api.socket")),
    ("harness-api.service", include_str!("../../units/harness-api.service")),
    ("harness-supervisor@.socket", include_str!("../../units/harness-supervisor@.socket")),
    ("harness-supervisor@.service", include_str!("../../units/harness-supervisor@.service")),
    ("harness-relay.service", include_str!("../../units/harness-relay.service")),
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

/// `@DOCS@` (the units now name the man page, `Documentation=man:harness(1)`; kept for a unit of
/// one's own that still says `@DOCS@`).
fn docs_dir() -> PathBuf {
    PathBuf::from("/usr/share/doc/harness")
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

/// The prefix of the units that serve `home`: `harness` for the default home (`~/.harness`, what
/// the package's units serve), `harness-<home id>` for any other, so units of several homes live
/// side by side and none shadows the package's.
pub fn unit_prefix(home: &Home) -> String {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let default =
        std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| canonical(&PathBuf::from(h).join(".harness")));
    if default.is_some_and(|d| d == canonical(&home.root)) {
        "harness".into()
    } else {
        format!("harness-{}", home.id())
    }
}

/// Renders every unit for `home`, named by its prefix; returns (file name, text). A non-default
/// home's API socket holds its Unix socket only: 127.0.0.1:7878 is the default home's.
pub fn rendered(bin: &Path, home: &Home) -> Vec<(String, String)> {
    let root = home.root.canonicalize().unwrap_or_else(|_| home.root.clone());
    let prefix = unit_prefix(home);
    let rename = |s: &str| {
        s.replace("harness-supervisor@", &format!("{prefix}-supervisor@"))
            .replace("harness-api.", &format!("{prefix}-api."))
            .replace("harness-relay.", &format!("{prefix}-relay."))
    };
    UNITS
        .iter()
        .map(|(name, text)| {
            let mut text = rename(&render(text, bin, &root, &docs_dir()));
            if prefix != "harness" {
                text = text
                    .lines()
                    .filter(|l| !l.starts_with("ListenStream=127.0.0.1:"))
                    .map(|l| format!("{l}\n"))
                    .collect();
            }
            (rename(name), text)
        })
        .collect()
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
    let prefix = unit_prefix(home);
    let shadow = if prefix == "harness"
        && Path::new("/usr/lib/systemd/user/harness-api.socket").exists()
        && unit_dir.is_none()
    {
        "\nnote: the package's units in /usr/lib/systemd/user serve this home already; these copies shadow them (and their updates) until `harness uninstall`."
    } else {
        ""
    };
    Ok(format!(
        "installed {} units for {} in {} ({reload})\nstart the API with:\n  systemctl --user enable --now {prefix}-api.socket\nits logs:\n  journalctl --user -u {prefix}-api.service\nto relay this home into a fleet: write {}/relay.env (mode 0600: HARNESS_NATS_URL=…, HARNESS_RELAY_HOST=…), then\n  systemctl --user enable --now {prefix}-relay.service{shadow}",
        units.len(),
        home.root.display(),
        dir.display(),
        home.root.display()
    ))
}

/// Stops and removes what `install` wrote.
pub fn uninstall(home: &Home, unit_dir: Option<&Path>) -> Result<String, String> {
    let prefix = unit_prefix(home);
    let dir = match unit_dir {
        Some(d) => d.to_path_buf(),
        None => user_unit_dir()?,
    };
    let live = unit_dir.is_none() && user_manager_answers();
    if live {
        let _ = std::process::Command::new("systemctl")
            .args(["--user", "disable", "--now"])
            .arg(format!("{prefix}-api.socket"))
            .arg(format!("{prefix}-api.service"))
            .arg(format!("{prefix}-relay.service"))
            .stderr(std::process::Stdio::null())
            .status();
    }
    let mut removed = 0;
    for (name, _) in UNITS {
        let name = name.replacen("harness-", &format!("{prefix}-"), 1);
        if std::fs::remove_file(dir.join(name)).is_ok() {
            removed += 1;
        }
    }
    if live {
        let _ = std::process::Command::new("systemctl").args(["--user", "daemon-reload"]).status();
    }
    Ok(format!("removed {removed} unit file(s) from {}", dir.display()))
}
