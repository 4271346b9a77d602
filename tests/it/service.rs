//! OS integration without a service manager of our own: the rendered units pass
//! `systemd-analyze --user verify` with no output at all (it exits 0 on unknown keys), and both
//! daemons run under `systemd-socket-activate` with a TCP and a Unix listener, tell READY=1 and
//! WATCHDOG=1 on a NOTIFY_SOCKET the test binds, and end an open SSE stream cleanly on SIGTERM.

use crate::common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn require(cmd: &str) -> bool {
    if have(cmd) {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "{cmd} is required under CI (bash .ci/run installs systemd)");
    eprintln!("skipped: {cmd} is not installed (apt-get install systemd)");
    false
}

/// Runs `systemd-analyze --user verify` on `files`; returns (exit code, all output).
/// `systemd-analyze --user verify FILES`: with harness(1) (`harness man`) on a MANPATH of `dir`, so
/// the units' `Documentation=man:harness(1)` is checked to resolve; where no `man` is installed,
/// that one check is left out (`--man=no`).
fn verify(dir: &Path, files: &[std::path::PathBuf]) -> (i32, String) {
    let man1 = dir.join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    let page = Command::new(bin()).arg("man").output().unwrap();
    std::fs::write(man1.join("harness.1"), &page.stdout).unwrap();
    let has_man = Command::new("man").arg("--version").output().is_ok_and(|o| o.status.success());
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .args(if has_man { None } else { Some("--man=no") })
        .args(files)
        .env("MANPATH", dir.join("man"))
        .env("XDG_RUNTIME_DIR", dir)
        .env("HOME", dir)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn rendered_units_pass_systemd_analyze_verify_with_no_output() {
    if !require("systemd-analyze") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let units = d.path().join("units");
    let home = d.path().join("h");
    let (code, out, err) =
        cli(&home, &["install", "--user", "--unit-dir", units.to_str().unwrap(), "--bin", bin().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    // A home that is not `~/.harness` gets units of its own, `harness-<home id>-…`, beside the
    // default home's (which the package ships): none shadows another.
    let api_socket = std::fs::read_dir(&units)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with("-api.socket"))
        .unwrap();
    let prefix = api_socket.strip_suffix("-api.socket").unwrap().to_string();
    assert!(prefix.len() == "harness-".len() + 16 && prefix.starts_with("harness-"), "{prefix}");
    let files: Vec<_> = ["api.socket", "api.service", "supervisor@.socket", "supervisor@.service", "relay.service"]
        .iter()
        .map(|n| units.join(format!("{prefix}-{n}")))
        .collect();
    assert_eq!(std::fs::read_dir(&units).unwrap().count(), 5, "only this home's five units (the relay's added)");
    let api = std::fs::read_to_string(&files[0]).unwrap();
    assert!(!api.contains("ListenStream=127.0.0.1"), "the default home's TCP port is not taken: {api}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(!text.contains("@BIN@") && !text.contains("@HOME@") && !text.contains("@DOCS@"), "{}", f.display());
        let directives: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
        assert!(!directives.iter().any(|l| l.contains("%I")), "%I unescapes the runId's -- into /");
    }
    let (code, text) = verify(d.path(), &files);
    assert!(code == 0 && text.trim().is_empty(), "systemd-analyze verify said (exit {code}):\n{text}");
    // The check can fail: a misspelt Type is only a warning with exit 0, and the test sees it.
    let bad = units.join("bad.service");
    std::fs::write(&bad, "[Service]\nType=notfy\nExecStart=/bin/true\n").unwrap();
    let (_, text) = verify(d.path(), &[bad]);
    assert!(!text.trim().is_empty(), "verify printed nothing for a broken unit");
    // A supervisor instance name with a real runId verifies too.
    let inst = units.join(format!("{prefix}-supervisor@0123456789ab--demo.service"));
    std::os::unix::fs::symlink(units.join(format!("{prefix}-supervisor@.service")), &inst).unwrap();
    let sock = units.join(format!("{prefix}-supervisor@0123456789ab--demo.socket"));
    std::os::unix::fs::symlink(units.join(format!("{prefix}-supervisor@.socket")), &sock).unwrap();
    let (code, text) = verify(d.path(), &[inst, sock]);
    assert!(code == 0 && text.trim().is_empty(), "instance verify (exit {code}):\n{text}");
}

/// A datagram socket standing in for systemd's NOTIFY_SOCKET.
struct Notify {
    sock: UnixDatagram,
    path: std::path::PathBuf,
    seen: String,
}

impl Notify {
    fn bind(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        Notify { sock, path, seen: String::new() }
    }
    /// Waits until a message containing `what` arrives.
    fn wait(&mut self, what: &str, within: Duration) -> bool {
        let end = Instant::now() + within;
        let mut buf = [0u8; 4096];
        while Instant::now() < end {
            if self.seen.contains(what) {
                return true;
            }
            if let Ok(n) = self.sock.recv(&mut buf) {
                self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                self.seen.push('\n');
            }
        }
        self.seen.contains(what)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn api_and_supervisor_run_socket_activated_with_notify_and_watchdog() {
    if !require("systemd-socket-activate") {
        return;
    }
    // A live run to talk to: registered only, its supervisor started by socket activation.
    let b = Bench::new();
    let plan = b.plan(r#"{"v":"plan/v1","slug":"sa","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"}]}"#);
    let out = b.harness("hang").arg("run").arg(&plan).arg("--register-only").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = String::from_utf8(out.stdout).unwrap().trim().to_string();
    std::fs::create_dir_all(b.home().join("sock")).unwrap();
    let sup_sock = b.home().join(format!("sock/{run}.sock"));
    let mut sup_notify = Notify::bind(&b.dir.path().join("n1").tap_mkdir());
    let engines = repo_dir().join("fixtures/engines");
    let env = |c: &mut Command, n: &Notify| {
        for (k, v) in [
            ("HARNESS_HOME", b.home().display().to_string()),
            ("HARNESS_CLAUDE_BIN", engines.join("fake-claude").display().to_string()),
            ("HARNESS_FAKE_SCENARIO", "hang".into()),
            ("HARNESS_FAKE_PACE", "fast".into()),
            ("HARNESS_FAKE_RECORD", b.record().display().to_string()),
            ("HARNESS_WRAPPERS", repo_dir().join("wrappers").display().to_string()),
            ("NOTIFY_SOCKET", n.path.display().to_string()),
            ("WATCHDOG_USEC", "400000".into()),
            ("PATH", std::env::var("PATH").unwrap()),
            ("RUST_LOG", "info".into()),
        ] {
            c.arg("-E").arg(format!("{k}={v}"));
        }
    };
    let mut c = Command::new("systemd-socket-activate");
    c.arg("-l").arg(&sup_sock);
    env(&mut c, &sup_notify);
    c.arg(bin()).args(["supervise", &run]).stdout(Stdio::null()).stderr(Stdio::null());
    let _sup = Proc { child: c.spawn().unwrap() };
    wait_for(Duration::from_secs(10), || sup_sock.exists().then_some(())).expect("the activator holds the socket");
    // The first connection starts the supervisor, which answers on the passed socket.
    let status = control(&sup_sock, &serde_json::json!({"verb":"status"}));
    assert_eq!(status["ok"], true, "{status}");
    assert!(sup_notify.wait("READY=1", Duration::from_secs(10)), "supervisor READY: {}", sup_notify.seen);
    assert!(sup_notify.wait("WATCHDOG=1", Duration::from_secs(5)), "supervisor WATCHDOG: {}", sup_notify.seen);
    wait_for(Duration::from_secs(20), || (!b.records().is_empty()).then_some(())).expect("the task runs");

    // The API with a TCP and a Unix listener.
    let port = free_port();
    let api_sock = b.dir.path().join("api.sock");
    let mut api_notify = Notify::bind(&b.dir.path().join("n2").tap_mkdir());
    let mut c = Command::new("systemd-socket-activate");
    c.arg("-l").arg(format!("127.0.0.1:{port}")).arg("-l").arg(&api_sock).arg("--fdname=api");
    env(&mut c, &api_notify);
    c.arg(bin()).arg("api").stdout(Stdio::null()).stderr(Stdio::null());
    let mut api = Proc { child: c.spawn().unwrap() };
    wait_for(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).ok()).expect("listening");
    let r = http(port, "GET", "/runs", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["runId"], run.as_str());
    assert_eq!(r.json()[0]["live"], true);
    let mut u = std::os::unix::net::UnixStream::connect(&api_sock).unwrap();
    u.write_all(b"GET /runs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    u.read_to_end(&mut buf).unwrap();
    assert_eq!(parse_response(&buf).status, 200);
    assert!(api_notify.wait("READY=1", Duration::from_secs(10)), "api READY: {}", api_notify.seen);
    assert!(api_notify.wait("WATCHDOG=1", Duration::from_secs(5)), "api WATCHDOG: {}", api_notify.seen);
    assert!(api_notify.seen.contains("STATUS=serving 2 listener(s)"), "{}", api_notify.seen);

    // SIGTERM with an SSE stream open: the stream ends cleanly and the API exits, within bounds.
    let mut s = SseConn::open(port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    assert_eq!(s.status, 200);
    s.next_event().expect("an event");
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(api.child.id() as i32, libc::SIGTERM) };
    while s.next().is_some() {}
    let ended = t.elapsed();
    let st = api.child.wait().unwrap();
    assert!(ended < Duration::from_secs(3), "stream ended after {ended:?}");
    assert_eq!(st.code(), Some(0), "API exit: {st:?}");
    assert!(t.elapsed() < Duration::from_secs(6));
    assert!(api_notify.wait("STOPPING=1", Duration::from_secs(2)), "{}", api_notify.seen);
    control(&sup_sock, &serde_json::json!({"verb":"stop"}));
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for std::path::PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

#[test]
fn packaged_units_are_the_rendered_units() {
    // packaging/deb/units/* must be units/* rendered for /usr/bin/harness and %h/.harness.
    for (name, text) in harness::os::install::UNITS {
        let want = harness::os::install::render(
            text,
            Path::new("/usr/bin/harness"),
            Path::new("%h/.harness"),
            Path::new("/usr/share/doc/harness"),
        );
        let got = std::fs::read_to_string(repo_dir().join("packaging/deb/units").join(name)).unwrap();
        assert_eq!(got, want, "packaging/deb/units/{name} drifted from units/{name}");
    }
    // The macOS agent plist is the rendered one too, and parses.
    let plist = std::fs::read_to_string(repo_dir().join("packaging/macos/com.harness.api.plist")).unwrap();
    let home = harness::os::home::Home::at("/usr/local/var/harness");
    assert_eq!(
        plist.trim_end(),
        harness::os::launchd::api_plist(Path::new("/usr/local/bin/harness"), &home).trim_end()
    );
}

#[test]
fn launchd_plists_round_trip_through_a_real_plist_parser() {
    let Ok(py) = Command::new("python3").arg("-c").arg("import plistlib").output() else {
        eprintln!("skipped: python3 is not available");
        return;
    };
    assert!(py.status.success());
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("h");
    let run = "0123456789ab--demo";
    for which in ["api", run] {
        let (code, out, err) = cli(&home, &["plist", which, "--bin", "/usr/local/bin/harness"]);
        assert_eq!(code, 0, "{err}");
        let f = d.path().join("p.plist");
        std::fs::write(&f, out).unwrap();
        let check = Command::new("python3")
            .arg("-c")
            .arg("import plistlib,sys,json; d=plistlib.load(open(sys.argv[1],'rb')); print(json.dumps(d))")
            .arg(&f)
            .output()
            .unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
        assert_eq!(v["EnvironmentVariables"]["HARNESS_HOME"], home.display().to_string());
        if which == "api" {
            assert_eq!(v["Label"], "com.harness.api");
            assert_eq!(v["Sockets"]["api-tcp"]["SockNodeName"], "127.0.0.1");
            assert_eq!(v["Sockets"]["api-unix"]["SockPathMode"], 384);
        } else {
            assert_eq!(v["Label"], format!("com.harness.supervisor.{run}"));
            assert_eq!(v["ProgramArguments"], serde_json::json!(["/usr/local/bin/harness", "supervise", run]));
            assert_eq!(
                v["Sockets"]["control"]["SockPathName"],
                home.join(format!("sock/{run}.sock")).display().to_string()
            );
        }
    }
}
