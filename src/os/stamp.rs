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

/// A log's line times, read from its sidecar as the log is read: lines asked in increasing order
/// (a line below the last one asked is found again). It holds a bounded window of the sidecar — the
/// last `KEEP` batches at or below the line last asked, and what the last `STEP` bytes read beyond
/// it — never the whole file: a 1 GB log has an ~88 MB sidecar, and every stream, page and relay
/// reads its own. A reader that starts deep in the log finds its first batch by a binary search
/// over the sidecar's bytes.
pub struct Times {
    path: PathBuf,
    /// The sidecar, once it exists.
    file: Option<std::fs::File>,
    /// Its inode: a sidecar replaced under us is read again.
    ino: u64,
    /// Its length at the last `refresh`: how far `at` reads.
    len: u64,
    /// The next byte to read.
    offset: u64,
    /// `(first line, count, unix ms)` in the order written, from `KEEP` batches at or below the
    /// line last asked on.
    window: std::collections::VecDeque<(u64, u64, i64)>,
    /// A record cut by the end of what was read.
    partial: Vec<u8>,
    /// A line longer than any record (not one of ours) is being skipped to its newline.
    skipping: bool,
    /// The lowest line the window answers for (the last asked, or where it was positioned).
    floor: u64,
}

/// Batches kept at or below the line asked: the one holding it and a few before, for a stamper that
/// died between its time and its lines (its batch is then followed by one starting at the same line).
const KEEP: usize = 4;
/// How much of the sidecar is read at once.
const STEP: u64 = 16 << 10;
/// A record is `<first> <count> <ms>`: a longer line is not one.
const MAX_RECORD: usize = 256;

/// One sidecar record (without its newline), if it is one.
fn record(l: &[u8]) -> Option<(u64, u64, i64)> {
    let mut f = std::str::from_utf8(l).ok()?.split(' ').map(str::parse::<i64>);
    let (Some(Ok(first)), Some(Ok(count)), Some(Ok(ms))) = (f.next(), f.next(), f.next()) else { return None };
    (first >= 1 && count >= 1).then_some((first as u64, count as u64, ms))
}

impl Times {
    /// The times of `log`'s lines from its first.
    pub fn of(log: &Path) -> Times {
        Times::from_line(log, 1)
    }

    /// The times of `log`'s lines from `line` on.
    pub fn from_line(log: &Path, line: u64) -> Times {
        let mut t = Times {
            path: sidecar(log),
            file: None,
            ino: 0,
            len: 0,
            offset: 0,
            window: std::collections::VecDeque::new(),
            partial: Vec::new(),
            skipping: false,
            floor: line.max(1),
        };
        t.refresh();
        t
    }

    /// Notes what the sidecar gained (call after reading the log: a line's time is written first).
    pub fn refresh(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = std::fs::metadata(&self.path) else {
            // Gone (or not there yet): no times, until it is.
            (self.file, self.len) = (None, 0);
            self.position(self.floor);
            return;
        };
        if self.file.is_some() && m.ino() == self.ino && m.len() >= self.len {
            self.len = m.len();
            return;
        }
        // Opened, replaced or cut: found again from the floor.
        self.file = std::fs::File::open(&self.path).ok();
        let m = self.file.as_ref().and_then(|f| f.metadata().ok());
        (self.ino, self.len) = m.map_or((0, 0), |m| (m.ino(), m.len()));
        self.position(self.floor);
    }

    /// When line `line` arrived, as RFC 3339 (ms), if the sidecar says.
    pub fn at(&mut self, line: u64) -> Option<String> {
        if line < self.floor {
            self.floor = line.max(1);
            self.position(self.floor);
        }
        self.floor = line.max(1);
        self.fill(line);
        // Batches are written in line order: the last one starting at or before it, if it covers it
        // (a few back, for a stamper that died between its time and its lines).
        let end = self.window.partition_point(|(first, _, _)| *first <= line);
        let gone = end.saturating_sub(KEEP);
        self.window.drain(..gone);
        let end = end - gone;
        let ms = self.window.range(..end).rev().find(|(first, count, _)| line < first + count)?.2;
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).ok()?);
        Some(humantime::format_rfc3339_millis(t).to_string())
    }

    /// How many batches are held now (what the bound is about).
    pub fn held(&self) -> usize {
        self.window.len()
    }

    /// `[from, to)` of the sidecar (shorter at its end, empty when it cannot be read).
    fn read(&self, from: u64, to: u64) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.file else { return Vec::new() };
        let mut buf = vec![0u8; usize::try_from(to.saturating_sub(from)).unwrap_or(0)];
        let mut got = 0;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], from + got as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        buf.truncate(got);
        buf
    }

    /// Reads on until the window holds a batch past `line` or the sidecar's known end, `STEP`
    /// bytes at a time.
    fn fill(&mut self, line: u64) {
        while self.window.back().is_none_or(|(first, _, _)| *first <= line) && self.offset < self.len {
            let bytes = self.read(self.offset, self.len.min(self.offset + STEP));
            if bytes.is_empty() {
                return;
            }
            self.offset += bytes.len() as u64;
            let mut rest: &[u8] = &bytes;
            if self.skipping {
                let Some(nl) = memchr::memchr(b'\n', rest) else { continue };
                (rest, self.skipping) = (&rest[nl + 1..], false);
            }
            while let Some(nl) = memchr::memchr(b'\n', rest) {
                let whole;
                let l = if self.partial.is_empty() {
                    &rest[..nl]
                } else {
                    self.partial.extend_from_slice(&rest[..nl]);
                    whole = std::mem::take(&mut self.partial);
                    &whole[..]
                };
                if let Some(b) = record(l) {
                    self.window.push_back(b);
                }
                rest = &rest[nl + 1..];
            }
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_RECORD {
                (self.partial, self.skipping) = (Vec::new(), true);
            }
        }
    }

    /// Puts the reading position `KEEP` batches before the last batch starting at or below `line`
    /// (found by a binary search over the bytes, each probe resynced to the next record), so the
    /// window holds every batch an answer from `line` on needs.
    fn position(&mut self, line: u64) {
        self.window.clear();
        (self.partial, self.skipping) = (Vec::new(), false);
        // `lo` is 0 or the start of a batch at or below `line`: never past what `line` needs.
        let (mut lo, mut hi) = (0u64, self.len);
        while hi - lo > STEP {
            let mid = lo + (hi - lo) / 2;
            match self.record_from(mid, hi) {
                Some((start, first)) if first <= line => lo = start,
                _ => hi = mid,
            }
        }
        self.offset = self.back(lo);
    }

    /// The first record starting at or after `at` (and before `hi`): its offset and first line.
    fn record_from(&self, at: u64, hi: u64) -> Option<(u64, u64)> {
        let from = at.saturating_sub(1);
        let buf = self.read(from, hi.min(from + STEP));
        let mut start = memchr::memchr(b'\n', &buf)? + 1;
        while let Some(nl) = memchr::memchr(b'\n', &buf[start..]) {
            if let Some((first, _, _)) = record(&buf[start..start + nl]) {
                return Some((from + start as u64, first));
            }
            start += nl + 1;
        }
        None
    }

    /// The offset of the `KEEP`th record before `lo` (a record's start, or 0), read backwards.
    fn back(&self, lo: u64) -> u64 {
        let (mut end, mut found) = (lo, 0);
        while end > 0 {
            let start = end.saturating_sub(STEP);
            let buf = self.read(start, end);
            let nls: Vec<usize> = memchr::memchr_iter(b'\n', &buf).collect();
            // The records wholly in `buf`, last first: each ends at a newline and starts after the
            // one before (or at the file's start).
            for k in (0..nls.len()).rev() {
                let from = match k {
                    0 if start == 0 => 0,
                    0 => break,
                    _ => nls[k - 1] + 1,
                };
                if record(&buf[from..nls[k]]).is_some() {
                    found += 1;
                    if found == KEEP {
                        return start + from as u64;
                    }
                }
            }
            // On before the first record cut by `start` (a longer line than a read is skipped).
            end = match nls.first() {
                Some(&nl) if start > 0 && start + (nl as u64) + 1 < end => start + nl as u64 + 1,
                _ => start,
            };
        }
        0
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
        let mut t = Times::of(&log);
        assert_eq!(t.at(1), None, "lines without the stamper have no time");
        let (a, c) = (t.at(3).unwrap(), t.at(5).unwrap());
        assert_eq!(t.at(4).as_deref(), Some(a.as_str()), "one batch, one time");
        assert!(c > a, "{a} then {c}");
        assert_eq!(t.at(6), None);
    }

    /// What `Times::at` answered before it was bounded: every batch held, the last one starting at
    /// or before the line that covers it, among the 4 before.
    fn naive(batches: &[(u64, u64, i64)], line: u64) -> Option<String> {
        let end = batches.partition_point(|(first, _, _)| *first <= line);
        let ms = batches[end.saturating_sub(4)..end].iter().rev().find(|(first, count, _)| line < first + count)?.2;
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).ok()?);
        Some(humantime::format_rfc3339_millis(t).to_string())
    }

    fn write_sidecar(log: &Path, batches: &[(u64, u64, i64)], junk_every: usize) {
        let mut out = String::new();
        for (i, (first, count, ms)) in batches.iter().enumerate() {
            if junk_every > 0 && i % junk_every == 0 {
                out.push_str(&"x".repeat(300 + i % 50_000));
                out.push('\n');
            }
            out.push_str(&format!("{first} {count} {ms}\n"));
        }
        std::fs::write(sidecar(log), out).unwrap();
    }

    /// A sidecar of 200,000 batches (a long session's): every line's time as before, in order and
    /// from any start, with a few thousand batches held at most, never the file.
    #[test]
    fn times_answer_as_before_holding_a_bounded_window() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("T.log");
        let mut batches = Vec::new();
        let mut line = 1u64;
        for i in 0..200_000u64 {
            let count = 1 + i % 3;
            // Now and then a stamper died between its time and its lines: the batch again.
            if i % 997 == 5 {
                batches.push((line, count, 1_700_000_000_000 + i as i64 - 1));
            }
            batches.push((line, count, 1_700_000_000_000 + i as i64));
            line += count + u64::from(i % 11 == 0);
        }
        write_sidecar(&log, &batches, 0);
        let mut t = Times::of(&log);
        let mut most = 0;
        for l in (1..line + 3).step_by(7) {
            assert_eq!(t.at(l), naive(&batches, l), "line {l}");
            most = most.max(t.held());
        }
        assert!(most < 4_000, "held {most} batches at most");
        for start in [1, 2, 77_777, line / 2, line - 1, line + 10] {
            let mut t = Times::from_line(&log, start);
            for l in start..start + 40 {
                assert_eq!(t.at(l), naive(&batches, l), "from {start}, line {l}");
            }
            // Asked below where it stood: found again.
            assert_eq!(t.at(start / 3 + 1), naive(&batches, start / 3 + 1), "back from {start}");
        }
    }

    /// Lines that are not records (longer than any, or cut), a sidecar that grows in the middle of a
    /// record, and one replaced by another file: the answers stay the naive ones.
    #[test]
    fn times_skip_junk_follow_growth_and_a_replaced_sidecar() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("T.log");
        let batches: Vec<_> = (0..5_000u64).map(|i| (1 + 2 * i, 2, 1_000 * i as i64)).collect();
        write_sidecar(&log, &batches, 333);
        let mut t = Times::from_line(&log, 4_000);
        for l in 4_000..4_100 {
            assert_eq!(t.at(l), naive(&batches, l), "line {l}");
        }
        // Grown by a record written in two pieces.
        let mut f = std::fs::OpenOptions::new().append(true).open(sidecar(&log)).unwrap();
        std::io::Write::write_all(&mut f, b"10001 5 9").unwrap();
        t.refresh();
        assert_eq!(t.at(10_002), None, "a cut record is no record yet");
        std::io::Write::write_all(&mut f, b"99\n").unwrap();
        t.refresh();
        let mut grown = batches.clone();
        grown.push((10_001, 5, 999));
        assert_eq!(t.at(10_002), naive(&grown, 10_002));
        // Replaced by another file (renamed over): read again from where it stands.
        let other: Vec<_> = (0..100u64).map(|i| (1 + 200 * i, 200, 7_000 * i as i64)).collect();
        let tmp = d.path().join("new");
        std::fs::write(&tmp, other.iter().map(|(a, b, c)| format!("{a} {b} {c}\n")).collect::<String>()).unwrap();
        std::fs::rename(&tmp, sidecar(&log)).unwrap();
        t.refresh();
        assert_eq!(t.at(10_002), naive(&other, 10_002));
        // Gone: no times.
        std::fs::remove_file(sidecar(&log)).unwrap();
        t.refresh();
        assert_eq!(t.at(10_003), None);
    }
}
