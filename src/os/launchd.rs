//! launchd (macOS): the API agent plist and one plist per supervised run (launchd has no unit
//! templates), starting a run's supervisor agent (`start_run_agent`: writes its plist and bootstraps
//! it, what `harness run --supervised` does on macOS), and receiving sockets with
//! `launch_activate_socket`. Plist generation is portable and tested everywhere; the rest only
//! compiles on macOS (it cannot be built or run on the Linux machines this project is tested on, so
//! it is kept to a few lines).

use crate::ids::RunId;
use crate::os::home::Home;
use std::path::Path;

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn plist(label: &str, args: &[&str], home: &Path, sockets: &str, log: &Path) -> String {
    let args: String = args.iter().map(|a| format!("    <string>{}</string>\n", xml(a))).collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{label}</string>
  <key>ProgramArguments</key>
  <array>
{args}  </array>
  <key>EnvironmentVariables</key>
  <dict>
    <key>HARNESS_HOME</key>
    <string>{home}</string>
  </dict>
  <key>Sockets</key>
  <dict>
{sockets}  </dict>
  <key>StandardErrorPath</key>
  <string>{log}</string>
</dict>
</plist>
"#,
        label = xml(label),
        home = xml(&home.display().to_string()),
        log = xml(&log.display().to_string()),
    )
}

/// The API agent: TCP 127.0.0.1:7878 (`api-tcp`) and `$HARNESS_HOME/sock/api.sock` (`api-unix`, 0600).
pub fn api_plist(bin: &Path, home: &Home) -> String {
    let sock = home.sock_dir().join("api.sock");
    let sockets = format!(
        "    <key>api-tcp</key>\n    <dict>\n      <key>SockNodeName</key>\n      <string>127.0.0.1</string>\n      <key>SockServiceName</key>\n      <string>7878</string>\n      <key>SockType</key>\n      <string>stream</string>\n    </dict>\n    <key>api-unix</key>\n    <dict>\n      <key>SockPathName</key>\n      <string>{}</string>\n      <key>SockPathMode</key>\n      <integer>384</integer>\n    </dict>\n",
        xml(&sock.display().to_string())
    );
    plist("com.harness.api", &[&bin.display().to_string(), "api"], &home.root, &sockets, &home.root.join("api.log"))
}

/// The relay agent (`harness relay`, kept alive; its settings in `$HARNESS_HOME/relay.env`).
pub fn relay_plist(bin: &Path, home: &Home) -> String {
    let p = plist(
        "com.harness.relay",
        &[&bin.display().to_string(), "relay"],
        &home.root,
        "",
        &home.root.join("relay.log"),
    );
    // No sockets; launchd starts it at load and again when it exits.
    p.replace(
        "  <key>Sockets</key>\n  <dict>\n  </dict>\n",
        "  <key>KeepAlive</key>\n  <true/>\n  <key>RunAtLoad</key>\n  <true/>\n",
    )
}

/// One run's supervisor agent: its control socket (`control`, 0600).
pub fn supervisor_plist(bin: &Path, home: &Home, run: &RunId) -> String {
    let sockets = format!(
        "    <key>control</key>\n    <dict>\n      <key>SockPathName</key>\n      <string>{}</string>\n      <key>SockPathMode</key>\n      <integer>384</integer>\n    </dict>\n",
        xml(&home.socket_path(run).display().to_string())
    );
    plist(
        &format!("com.harness.supervisor.{run}"),
        &[&bin.display().to_string(), "supervise", run.as_str()],
        &home.root,
        &sockets,
        &home.runs_dir().join(format!("{run}.log")),
    )
}

/// Writes the API agent plist to `~/Library/LaunchAgents` and says how to load it.
#[cfg(target_os = "macos")]
pub fn install_agent(bin: &Path, home: &Home) -> Result<String, String> {
    let dir = std::path::PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?).join("Library/LaunchAgents");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let p = dir.join("com.harness.api.plist");
    crate::os::home::write_atomic(&p, api_plist(bin, home).as_bytes(), 0o644).map_err(|e| e.to_string())?;
    // launchd opens the log with its own umask: made here first (0600), it appends to ours.
    home.ensure().map_err(|e| e.to_string())?;
    crate::os::home::open_private(&home.root.join("api.log"), true).map_err(|e| e.to_string())?;
    Ok(format!("wrote {}\nload it with:\n  launchctl bootstrap gui/$(id -u) {}", p.display(), p.display()))
}

/// `harness run --supervised` on macOS: writes the run's supervisor plist to
/// `~/Library/LaunchAgents` and bootstraps it (launchd has no templates: one plist per run).
#[cfg(target_os = "macos")]
pub fn start_run_agent(bin: &Path, home: &Home, run: &RunId) -> Result<String, String> {
    let dir = std::path::PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?).join("Library/LaunchAgents");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let p = dir.join(format!("com.harness.supervisor.{run}.plist"));
    crate::os::home::write_atomic(&p, supervisor_plist(bin, home, run).as_bytes(), 0o644).map_err(|e| e.to_string())?;
    // launchd opens the log with its own umask: made here first (0600), it appends to ours.
    crate::os::home::open_private(&home.runs_dir().join(format!("{run}.log")), true).map_err(|e| e.to_string())?;
    let uid = nix::unistd::getuid().as_raw();
    let st = std::process::Command::new("launchctl")
        .arg("bootstrap")
        .arg(format!("gui/{uid}"))
        .arg(&p)
        .status()
        .map_err(|e| format!("launchctl: {e}"))?;
    if !st.success() {
        return Err(format!("launchctl bootstrap gui/{uid} {} failed", p.display()));
    }
    Ok(format!("launchd agent com.harness.supervisor.{run}"))
}

/// The sockets launchd holds for `name` in the job's `Sockets` dict (macOS only).
#[cfg(target_os = "macos")]
pub fn activate_socket(name: &str) -> Vec<std::os::fd::RawFd> {
    unsafe extern "C" {
        fn launch_activate_socket(
            name: *const libc::c_char,
            fds: *mut *mut libc::c_int,
            cnt: *mut libc::size_t,
        ) -> libc::c_int;
    }
    let Ok(cname) = std::ffi::CString::new(name) else { return Vec::new() };
    let mut fds: *mut libc::c_int = std::ptr::null_mut();
    let mut cnt: libc::size_t = 0;
    // SAFETY: launchd allocates `fds` (freed below) and sets `cnt`.
    unsafe {
        if launch_activate_socket(cname.as_ptr(), &mut fds, &mut cnt) != 0 || fds.is_null() {
            return Vec::new();
        }
        let out = std::slice::from_raw_parts(fds, cnt).to_vec();
        libc::free(fds as *mut libc::c_void);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plists_name_the_binary_the_home_and_the_sockets() {
        let home = Home::at("/Users/me/.harness");
        let p = api_plist(Path::new("/usr/local/bin/harness"), &home);
        assert!(p.contains("<string>/usr/local/bin/harness</string>") && p.contains("<integer>384</integer>"));
        let run = RunId::parse("0123456789ab--demo").unwrap();
        let s = supervisor_plist(Path::new("/usr/local/bin/harness"), &home, &run);
        assert!(s.contains("com.harness.supervisor.0123456789ab--demo"));
        assert!(s.contains("/Users/me/.harness/sock/0123456789ab--demo.sock"));
        let r = relay_plist(Path::new("/usr/local/bin/harness"), &home);
        assert!(
            r.contains("<string>relay</string>") && r.contains("<key>KeepAlive</key>") && !r.contains("Sockets"),
            "{r}"
        );
    }
}
