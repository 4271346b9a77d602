//! Test support shared by the integration tests: temp homes, the real `harness` binary as a child
//! process (killed on drop), and a raw HTTP/1.1 client that can send any bytes (hostile paths,
//! forged Host headers) over loopback.
#![allow(dead_code)]

pub mod nats;
pub mod real;
pub mod standin;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_harness"))
}

pub fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `harness` with `HARNESS_HOME` set (and fsync off: tests hammer the journal on tmp dirs).
pub fn harness(home: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env("HARNESS_HOME", home).env("HARNESS_JOURNAL_FSYNC", "0").env("RUST_LOG", "warn").stdin(Stdio::null());
    c
}

/// Runs `harness args…`, returning (exit code, stdout, stderr).
pub fn cli(home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = harness(home).args(args).output().expect("spawn harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Installs the fixture runs into `home`; returns (fixture name, runId) pairs.
pub fn install_fixture_runs(home: &Path) -> Vec<(String, String)> {
    let out = Command::new(repo_dir().join("fixtures/runs/setup.sh"))
        .arg(home)
        .arg(bin())
        .env("HARNESS_JOURNAL_FSYNC", "0")
        .output()
        .expect("run setup.sh");
    assert!(out.status.success(), "setup.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once('\t').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect()
}

pub fn run_id_of(runs: &[(String, String)], name: &str) -> String {
    runs.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no fixture {name}")).1.clone()
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    /// Waits up to `timeout` for the process to exit; its exit code (-1 when killed by a signal).
    pub fn wait_exit(&mut self, timeout: Duration) -> i32 {
        wait_for(timeout, || self.child.try_wait().unwrap().map(|s| s.code().unwrap_or(-1)))
            .unwrap_or_else(|| panic!("process {} did not exit within {timeout:?}", self.child.id()))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `harness api` on an ephemeral loopback port.
pub struct ApiProc {
    pub proc: Proc,
    pub port: u16,
}

impl ApiProc {
    pub fn start(home: &Path, extra: &[&str]) -> ApiProc {
        ApiProc::start_env(home, extra, &[])
    }

    /// `start` with extra environment (e.g. a fleet API's NATS credentials).
    pub fn start_env(home: &Path, extra: &[&str], env: &[(&str, &str)]) -> ApiProc {
        let mut cmd = harness(home);
        cmd.args(["api", "--listen", "127.0.0.1:0"]).args(extra).envs(env.iter().copied());
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn harness api");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read listen line");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from harness api: {line:?}"));
        ApiProc { proc: Proc { child }, port }
    }

    pub fn get(&self, path: &str) -> Resp {
        http(self.port, "GET", path, &[], None)
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request with `Connection: close`. `Host: 127.0.0.1:<port>` unless `headers` has one.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    let mut raw = req.into_bytes();
    if let Some(b) = body {
        raw.extend_from_slice(b);
    }
    http_raw(port, &raw)
}

/// Sends raw bytes, reads the whole response until the server closes.
pub fn http_raw(port: u16, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

pub fn parse_response(buf: &[u8]) -> Resp {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| {
        panic!("no response head in {:?}", String::from_utf8_lossy(buf));
    });
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))).collect();
    let mut body = buf[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Resp { status, headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
    out
}

/// Polls `f` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Compiles a JSON Schema file from `spec/`.
pub fn schema(name: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(repo_dir().join("spec").join(name)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::options().should_validate_formats(true).build(&v).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Asserts `v` validates against `validator`, listing every error.
pub fn assert_valid(validator: &jsonschema::Validator, v: &serde_json::Value, what: &str) {
    let errs: Vec<String> = validator.iter_errors(v).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errs.is_empty(), "{what} violates its schema:\n{}\n{v}", errs.join("\n"));
}

/// Makes a git repo with one commit in `dir`.
/// `git -C dir args` (with an identity), asserting success; its trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Paths a commit changed, sorted.
pub fn files_of(repo: &Path, sha: &str) -> Vec<String> {
    let mut v: Vec<String> = git(repo, &["show", "--name-only", "--format=", sha])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

pub fn git_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let git = |args: &[&str]| git(dir, args);
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README"), "x\n").unwrap();
    git(&["add", "README"]);
    git(&["commit", "-qm", "init"]);
}

pub fn git_head(dir: &Path) -> String {
    let o = Command::new("git").arg("-C").arg(dir).args(["rev-parse", "HEAD"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Kills every process whose environment names this `HARNESS_HOME` (supervisors detached with
/// setsid, their wrappers and engines): the cleanup of tests that start supervised runs.
pub fn kill_all_with_home(home: &Path) {
    let needle = format!("HARNESS_HOME={}", home.display());
    // Engines run under `env -i` with only the variables they need, so they no longer carry
    // HARNESS_HOME: in a test's own temp dir (a `Bench`), what runs there or records there is its.
    let scope = home
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".tmp")))
        .map(|d| d.to_path_buf());
    let ours = |pid: u32, env: &[u8]| {
        if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
            return true;
        }
        let Some(dir) = &scope else { return false };
        let record = format!("HARNESS_FAKE_RECORD={}/", dir.display());
        env.split(|&b| b == 0).any(|kv| kv.starts_with(record.as_bytes()))
            || std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c.starts_with(dir))
    };
    let me = std::process::id();
    for _ in 0..3 {
        let mut found = false;
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            if pid == me {
                continue;
            }
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
            if ours(pid, &env) {
                // SAFETY: killing a process of this test's own run.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                found = true;
            }
        }
        if !found {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Live processes whose environment names this `HARNESS_HOME`.
pub fn processes_with_home(home: &Path) -> Vec<u32> {
    processes_with_env(&format!("HARNESS_HOME={}", home.display()))
}

/// Live (not zombie) processes other than this one whose environment has the entry `needle`
/// (`NAME=value`).
pub fn processes_with_env(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        match harness::supervisor::kill::stat_fields(pid as i32) {
            Some((state, _, _)) if state != 'Z' => {}
            _ => continue,
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// The complete JSON lines of a file (none when it does not exist); panics on a complete line that
/// is not JSON. A last line without its newline is being written right now: it is left out.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l}", path.display())))
        .collect()
}

/// An events/v1 event saying the normalizer could not map its line (an unmapped kind, a broken shape,
/// not JSON / not UTF-8): what a real capture must never yield.
pub fn unmappable(event: &serde_json::Value) -> bool {
    let reason = event["data"]["reason"].as_str().unwrap_or("");
    reason.starts_with("unmapped") || reason.contains("broken shape") || reason.starts_with("not ")
}

/// One request on a supervisor's control socket.
pub fn control(sock: &Path, req: &serde_json::Value) -> serde_json::Value {
    try_control(sock, req).unwrap_or_else(|e| panic!("connect {}: {e}", sock.display()))
}

/// One request on a supervisor's control socket that may have just gone (its run ended, or it was
/// killed): the connect error is returned; anything after a connect still panics.
#[allow(dead_code)]
pub fn try_control(sock: &Path, req: &serde_json::Value) -> std::io::Result<serde_json::Value> {
    let s = std::os::unix::net::UnixStream::connect(sock)?;
    Ok(exchange(s, req))
}

fn exchange(mut s: std::os::unix::net::UnixStream, req: &serde_json::Value) -> serde_json::Value {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("answer {line:?}: {e}"))
}

/// Every line of `journal` is a valid runstate/v1 record.
pub fn assert_journal_valid(journal: &[serde_json::Value]) {
    let runstate = schema("runstate.schema.json");
    for (i, r) in journal.iter().enumerate() {
        assert_valid(&runstate, r, &format!("journal line {}", i + 1));
    }
}

/// A scratch git repository, a harness home and fake engines: the setting of a run.
pub struct Bench {
    pub dir: tempfile::TempDir,
}

impl Bench {
    pub fn new() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        git_repo(&dir.path().join("repo"));
        std::fs::create_dir(dir.path().join("home")).unwrap();
        Bench { dir }
    }
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }
    pub fn record(&self) -> PathBuf {
        self.dir.path().join("record.jsonl")
    }
    pub fn plan(&self, json: &str) -> PathBuf {
        let p = self.dir.path().join("plan.json");
        std::fs::write(&p, json).unwrap();
        p
    }
    /// `harness …` in the repo with the fake engines and this home.
    pub fn harness(&self, scenario: &str) -> Command {
        let mut c = harness(&self.home());
        let engines = repo_dir().join("fixtures/engines");
        c.current_dir(self.repo())
            .env("HARNESS_CLAUDE_BIN", engines.join("fake-claude"))
            .env("HARNESS_CURSOR_BIN", engines.join("fake-cursor-agent"))
            .env("HARNESS_CODEX_BIN", engines.join("fake-codex"))
            .env("HARNESS_FAKE_SCENARIO", scenario)
            .env("HARNESS_FAKE_PACE", "fast")
            .env("HARNESS_FAKE_RECORD", self.record())
            .env("HARNESS_WRAPPERS", repo_dir().join("wrappers"))
            .env("RUST_LOG", "info");
        c
    }
    /// Starts `harness run PLAN --supervised --foreground --kill-grace 1s [extra]` as a child (its
    /// stderr in `supervisor.log`) and waits for the run's pointer and live socket.
    pub fn start_supervised(&self, plan: &str, scenario: &str, extra: &[&str]) -> Proc {
        self.start_supervised_with(plan, scenario, extra, &[])
    }
    /// `start_supervised` with extra environment (e.g. the real engines instead of the fakes).
    pub fn start_supervised_with(&self, plan: &str, scenario: &str, extra: &[&str], env: &[(&str, String)]) -> Proc {
        let p = self.plan(plan);
        let mut cmd = self.harness(scenario);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let child = cmd
            .arg("run")
            .arg(&p)
            .args(["--supervised", "--foreground", "--kill-grace", "1s"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("supervisor.log")).unwrap())
            .spawn()
            .unwrap();
        let proc = Proc { child };
        wait_for(Duration::from_secs(30), || {
            (self.try_run_id().is_some() && harness::control::is_live(&self.sock())).then_some(())
        })
        .unwrap_or_else(|| panic!("supervisor never opened its socket: {}", self.supervisor_log()));
        proc
    }
    /// What the supervisor started by `start_supervised` printed on stderr.
    pub fn supervisor_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("supervisor.log")).unwrap_or_default()
    }
    pub fn records(&self) -> Vec<serde_json::Value> {
        json_lines(&self.record())
    }
    /// The only registered run's id.
    pub fn run_id(&self) -> String {
        self.try_run_id().expect("a registered run")
    }
    /// The registered run's id, once its pointer is in place (not just the temp file of the
    /// atomic write).
    pub fn try_run_id(&self) -> Option<String> {
        let mut ids: Vec<String> = std::fs::read_dir(self.home().join("runs"))
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // Skip the temp file of an atomic write in progress.
            .filter(|n| !n.starts_with('.') && n.ends_with(".json"))
            .map(|n| n.trim_end_matches(".json").to_string())
            .collect();
        ids.sort();
        ids.pop()
    }
    pub fn sock(&self) -> PathBuf {
        self.home().join("sock").join(format!("{}.sock", self.run_id()))
    }
    pub fn journal(&self) -> Vec<serde_json::Value> {
        let slug = self.run_id().split("--").nth(1).unwrap().to_string();
        let path = self.repo().join(format!("runstate/{slug}.jsonl"));
        assert!(path.exists(), "no journal at {}", path.display());
        json_lines(&path)
    }
    pub fn view(&self) -> serde_json::Value {
        let (code, out, err) = cli(&self.home(), &["journal", "show", &self.run_id()]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }
    pub fn state(&self, task: &str) -> Option<String> {
        self.view()["tasks"][task]["state"].as_str().map(str::to_string)
    }
    /// Waits up to `timeout` until `task`'s journaled state is `state`.
    pub fn wait_state(&self, task: &str, state: &str, timeout: Duration) {
        wait_for(timeout, || (self.state(task).as_deref() == Some(state)).then_some(())).unwrap_or_else(|| {
            panic!("{task} never reached {state}: {:#}\n{}", self.view()["tasks"], self.supervisor_log())
        });
    }
    /// The journal's control records of one verb, in order.
    pub fn controls(&self, verb: &str) -> Vec<serde_json::Value> {
        self.journal().into_iter().filter(|r| r["kind"] == "control" && r["verb"] == verb).collect()
    }
    /// Runs `harness supervise <runId>` (recovery) with `scenario` until it exits; its exit code.
    /// Its stderr goes to `supervise.log` in the bench dir, shown when it does not exit in time.
    pub fn supervise_to_the_end(&self, scenario: &str) -> i32 {
        let log = self.dir.path().join("supervise.log");
        let child = self
            .harness(scenario)
            .args(["supervise", &self.run_id()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut p = Proc { child };
        wait_for(Duration::from_secs(30), || p.child.try_wait().unwrap().map(|s| s.code().unwrap_or(-1)))
            .unwrap_or_else(|| {
                panic!(
                    "the supervisor did not exit within 30 s: {:#}\n{}",
                    self.view()["tasks"],
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
    }
    /// Commits in the repo carrying this run's and task's trailers.
    /// The commit of `task` on the run's branch.
    pub fn commit_of(&self, task: &str) -> String {
        harness::os::git::find_task_commit(&self.repo(), &self.run_id(), task)
            .unwrap_or_else(|| panic!("no commit of {task}"))
    }

    pub fn commits_of(&self, task: &str) -> usize {
        harness::os::git::count_task_commits(&self.repo(), &self.run_id(), task)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        kill_all_with_home(&self.home());
    }
}

/// One SSE event or comment read from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sse {
    pub id: Option<String>,
    pub data: String,
    /// Its `event:` type (`None`: a `message`).
    pub event: Option<String>,
    /// A comment line (`: heartbeat`), when this is one.
    pub comment: Option<String>,
}

/// A raw SSE connection: HTTP/1.1 over loopback, chunked body decoded by hand.
pub struct SseConn {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunk_left: usize,
    pending: Vec<u8>,
    /// Read position in `pending` (compacted now and then, not per line).
    pos: usize,
    pub stream: TcpStream,
}

impl SseConn {
    pub fn open(port: u16, path: &str, headers: &[(&str, &str)]) -> SseConn {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let stream = s.try_clone().unwrap();
        let mut reader = BufReader::new(s);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).unwrap();
        let status = status_line.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            reader.read_line(&mut l).unwrap();
            let l = l.trim_end().to_string();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        SseConn { status, headers, reader, chunk_left: 0, pending: Vec::new(), pos: 0, stream }
    }

    /// Reads one line of the (chunked) body; None at the end of the body or on timeout.
    fn body_line(&mut self) -> Option<String> {
        loop {
            if let Some(nl) = self.pending[self.pos..].iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&self.pending[self.pos..self.pos + nl]).into_owned();
                self.pos += nl + 1;
                if self.pos > 1 << 16 {
                    self.pending.drain(..self.pos);
                    self.pos = 0;
                }
                return Some(line);
            }
            if self.chunk_left == 0 {
                let mut size = String::new();
                if self.reader.read_line(&mut size).ok()? == 0 {
                    return None;
                }
                let size = size.trim();
                if size.is_empty() {
                    continue;
                }
                let n = usize::from_str_radix(size, 16).ok()?;
                if n == 0 {
                    return None;
                }
                self.chunk_left = n;
            }
            let mut buf = vec![0u8; self.chunk_left.min(65536)];
            let got = self.reader.read(&mut buf).ok()?;
            if got == 0 {
                return None;
            }
            self.pending.extend_from_slice(&buf[..got]);
            self.chunk_left -= got;
            if self.chunk_left == 0 {
                let mut crlf = [0u8; 2];
                self.reader.read_exact(&mut crlf).ok()?;
            }
        }
    }

    /// The next event or comment.
    pub fn next(&mut self) -> Option<Sse> {
        let mut ev = Sse { id: None, data: String::new(), event: None, comment: None };
        loop {
            let line = self.body_line()?;
            if line.is_empty() {
                if ev.id.is_some() || !ev.data.is_empty() || ev.comment.is_some() {
                    return Some(ev);
                }
                continue;
            }
            if let Some(c) = line.strip_prefix(':') {
                ev.comment = Some(c.trim().to_string());
            } else if let Some(v) = line.strip_prefix("id: ") {
                ev.id = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                ev.data.push_str(v);
            } else if let Some(v) = line.strip_prefix("event: ") {
                ev.event = Some(v.to_string());
            }
        }
    }

    /// The next event (comments and `retry:` skipped).
    pub fn next_event(&mut self) -> Option<Sse> {
        loop {
            let e = self.next()?;
            if e.comment.is_none() && !e.data.is_empty() {
                return Some(e);
            }
        }
    }
}

/// `harness top --api 127.0.0.1:<port>` in a pseudo-terminal of 160×40 (util-linux `script`), with
/// what it draws collected as it arrives (each read with its arrival time). Killed on drop.
pub struct TopPty {
    pub child: Child,
    pub keys: std::process::ChildStdin,
    pub screen: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
}

impl TopPty {
    pub fn start(home: &Path, port: u16) -> TopPty {
        let cmd = format!("stty cols 160 rows 40; exec {} top --api 127.0.0.1:{port}", bin().display());
        let mut child = Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .env("HARNESS_HOME", home)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1)");
        let screen: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>> = Default::default();
        let (mut out, s2) = (child.stdout.take().unwrap(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s2.lock().unwrap().push((Instant::now(), String::from_utf8_lossy(&buf[..n]).into_owned()));
            }
        });
        let keys = child.stdin.take().unwrap();
        TopPty { child, keys, screen }
    }

    /// Types `k`.
    pub fn press(&mut self, k: &str) {
        self.keys.write_all(k.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// How many reads have arrived so far (a mark for `shown_since`).
    pub fn mark(&self) -> usize {
        self.screen.lock().unwrap().len()
    }

    /// When `what` was first drawn after `mark` (the arrival of the read that completed it), waiting
    /// up to `timeout`.
    pub fn shown_since(&self, mark: usize, what: &str, timeout: Duration) -> Option<Instant> {
        wait_for(timeout, || {
            let s = self.screen.lock().unwrap();
            let mut text = String::new();
            let mut ends = Vec::new();
            for (at, t) in s.iter().skip(mark) {
                text.push_str(t);
                ends.push((text.len(), *at));
            }
            let end = text.find(what)? + what.len();
            ends.iter().find(|(e, _)| *e >= end).map(|(_, at)| *at)
        })
    }

    /// Everything drawn so far, as one text.
    pub fn text(&self) -> String {
        self.screen.lock().unwrap().iter().map(|(_, t)| t.as_str()).collect()
    }
}

impl Drop for TopPty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
