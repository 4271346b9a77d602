//! True times for a log's lines: `harness stamp --log LOG -- CMD…` runs the engine with its stdout
//! piped, appends what it prints to the log as it comes, and before each batch of complete lines
//! appends `<first line> <count> <unix ms>` to the sidecar `LOG.times` — so an event whose line has
//! no timestamp of its own carries the time its line arrived, equal live and in replay. The stamper
//! is the wrapper's child in the task's process group: it exits with the engine's code (128 + the
//! signal when one killed it), and a TERM, INT or HUP sent to the group does not stop it before the
//! engine's last line is in the log (its handler is reset at exec: the engine gets the default).
//!
//! `Times` reads a sidecar; a log without one (older runs, DynWF, a wrapper without the stamper) has
//! no line times, and its events keep the time they were read.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `LOG.times`.
pub fn sidecar(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".times");
    PathBuf::from(s)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Complete lines in `path` now (its newlines).
fn lines_in(path: &Path) -> u64 {
    let Ok(mut f) = std::fs::File::open(path) else { return 0 };
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += memchr::memchr_iter(b'\n', &buf[..k]).count() as u64,
        }
    }
}

/// Runs `cmd` with its stdout appended to `log` and the arrival of its lines to `LOG.times`.
/// Returns the exit code to exit with.
pub fn run(log: &Path, cmd: &[OsString]) -> Result<i32, String> {
    let Some((prog, args)) = cmd.split_first() else { return Err("stamp needs a command after --".into()) };
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(p)
            .map_err(|e| format!("cannot open {}: {e}", p.display()))
    };
    let mut out = open(log)?;
    let mut times = open(&sidecar(log)).ok();
    // A signal to the group must not stop the copy before the engine's last line: noted, not obeyed
    // (a handler, not SIG_IGN, so the engine does not inherit it).
    let noted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let _ = signal_hook::flag::register(sig, noted.clone());
    }
    let mut child = std::process::Command::new(prog)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", prog.to_string_lossy()))?;
    let mut pipe = child.stdout.take().expect("piped");
    let mut next = lines_in(log) + 1;
    let log_name = log.display().to_string();
    // The copy runs beside the wait: a grandchild the engine left (a dev server, a watcher) may
    // hold the pipe open long after the engine exited, and must not hold the turn.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let copied = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let copied2 = copied.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut broken = false;
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = &buf[..n];
            let complete = memchr::memchr_iter(b'\n', chunk).count() as u64;
            // The time first: a reader that sees the line finds its time.
            if complete > 0
                && let Some(t) = times.as_mut()
                && t.write_all(format!("{next} {complete} {}\n", now_ms()).as_bytes()).is_err()
            {
                times = None;
            }
            next += complete;
            copied2.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            if !broken && let Err(e) = out.write_all(chunk) {
                // Keep draining (the engine must not block on a full pipe); the log says what it has.
                eprintln!("harness stamp: cannot append to {log_name}: {e}");
                broken = true;
            }
        }
        let _ = done_tx.send(());
    });
    let status = child.wait().map_err(|e| format!("waiting for the engine: {e}"))?;
    // What the engine wrote before it exited is in the pipe: copied to its end (for as long as the
    // copy makes progress), then the stamper goes once the pipe is quiet for 0.5 s (a grandchild
    // still writing gets EPIPE, as it would on a closed terminal) — 10 s at most, for one that
    // never stops.
    let (mut seen, until) = (u64::MAX, std::time::Instant::now() + std::time::Duration::from_secs(10));
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        done_rx.recv_timeout(std::time::Duration::from_millis(500))
    {
        let now = copied.load(std::sync::atomic::Ordering::Relaxed);
        if now == seen || std::time::Instant::now() >= until {
            break;
        }
        seen = now;
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1))
}

/// A log's line times, read from its sidecar as it grows.
pub struct Times {
    path: PathBuf,
    offset: u64,
    /// `(first line, count, unix ms)`, in the order written.
    batches: Vec<(u64, u64, i64)>,
    partial: Vec<u8>,
}

impl Times {
    pub fn of(log: &Path) -> Times {
        let mut t = Times { path: sidecar(log), offset: 0, batches: Vec::new(), partial: Vec::new() };
        t.refresh();
        t
    }

    /// Reads what the sidecar gained (call after reading the log: a line's time is written first).
    pub fn refresh(&mut self) {
        let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if len < self.offset {
            (self.offset, self.batches, self.partial) = (0, Vec::new(), Vec::new());
        }
        if len == self.offset {
            return;
        }
        let bytes = super::tail::read_from(&self.path, self.offset, Some(len));
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let Some(end) = memchr::memrchr(b'\n', &self.partial) else { return };
        let done: Vec<u8> = self.partial.drain(..=end).collect();
        for l in done.split(|&b| b == b'\n') {
            let mut f = std::str::from_utf8(l).unwrap_or("").split(' ').map(str::parse::<i64>);
            if let (Some(Ok(first)), Some(Ok(count)), Some(Ok(ms))) = (f.next(), f.next(), f.next())
                && first >= 1
                && count >= 1
            {
                self.batches.push((first as u64, count as u64, ms));
            }
        }
    }

    /// When line `line` arrived, as RFC 3339 (ms), if the sidecar says.
    pub fn at(&self, line: u64) -> Option<String> {
        // Batches are written in line order: the last one starting at or before it, if it covers it
        // (a few back, for a stamper that died between its time and its lines).
        let end = self.batches.partition_point(|(first, _, _)| *first <= line);
        let ms =
            self.batches[end.saturating_sub(4)..end].iter().rev().find(|(first, count, _)| line < first + count)?.2;
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).ok()?);
        Some(humantime::format_rfc3339_millis(t).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine that leaves a background child holding its stdout (a dev server) does not hold
    /// the turn: the stamper goes soon after the engine exits, with its code and its lines.
    #[test]
    fn a_grandchild_holding_stdout_does_not_hold_the_stamper() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("T.log");
        let cmd: Vec<OsString> = ["sh", "-c", "sleep 30 & echo started; exit 0"].map(Into::into).to_vec();
        let t = std::time::Instant::now();
        assert_eq!(run(&log, &cmd).unwrap(), 0);
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "held {:?}", t.elapsed());
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "started\n");
    }

    #[test]
    fn the_stamper_copies_every_line_keeps_the_exit_code_and_times_each_batch() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("T.log");
        std::fs::write(&log, "earlier 1\nearlier 2\n").unwrap();
        let cmd: Vec<OsString> =
            ["sh", "-c", "printf 'a\\nb\\n'; sleep 0.3; printf 'c'; printf '\\n'; exit 3"].map(Into::into).to_vec();
        assert_eq!(run(&log, &cmd).unwrap(), 3);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "earlier 1\nearlier 2\na\nb\nc\n");
        let t = Times::of(&log);
        assert_eq!(t.at(1), None, "lines without the stamper have no time");
        let (a, c) = (t.at(3).unwrap(), t.at(5).unwrap());
        assert_eq!(t.at(4).as_deref(), Some(a.as_str()), "one batch, one time");
        assert!(c > a, "{a} then {c}");
        assert_eq!(t.at(6), None);
    }
}
