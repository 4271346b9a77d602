//! Following a logfile: complete lines with their 1-based ordinals, starting at any ordinal, waking
//! on inotify (one shared watcher per process) with a polling fallback. A partial last line is held
//! back until its newline arrives. It never parses JSON.
//!
//! `LineIndex` remembers the byte offset of every 4096th line of each file (keyed by path and
//! inode), so resuming at line N of a large log seeks close to it instead of rescanning the file.
//! Each file's index has its own lock, held while that file is scanned: a deep resume in one log
//! never waits on, or makes wait, a stream of another. Scans block: async callers run them on the
//! blocking pool.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

const STRIDE: u64 = 4096;

#[derive(Default)]
struct FileIndex {
    ino: u64,
    /// offsets[k] = byte offset of line k*STRIDE + 1.
    offsets: Vec<u64>,
    /// Bytes scanned so far (all complete lines), and the ordinal of the next line there.
    scanned: u64,
    next_line: u64,
}

/// Sparse line-offset index shared by all streams of a process. The map's lock is held only to find
/// a file's entry; the entry's own lock guards its scan.
#[derive(Default)]
pub struct LineIndex {
    files: Mutex<HashMap<PathBuf, Arc<Mutex<FileIndex>>>>,
}

impl LineIndex {
    /// Where line `line` (1-based) starts: `(byte offset, line)`. When the file has fewer complete
    /// lines, the end of its complete lines and the ordinal that comes next.
    pub fn offset_of(&self, path: &Path, line: u64) -> io::Result<(u64, u64)> {
        let line = line.max(1);
        let mut f = File::open(path)?;
        let meta = f.metadata()?;
        let entry = self.files.lock().unwrap_or_else(|p| p.into_inner()).entry(path.to_path_buf()).or_default().clone();
        let mut guard = entry.lock().unwrap_or_else(|p| p.into_inner());
        let idx = &mut *guard;
        if idx.ino != meta.ino() || meta.len() < idx.scanned || idx.offsets.is_empty() {
            *idx = FileIndex { ino: meta.ino(), offsets: vec![0], scanned: 0, next_line: 1 };
        }
        if line <= idx.next_line {
            // Inside the indexed part: from the nearest indexed line, scan without extending.
            let k = ((line - 1) / STRIDE) as usize;
            let (pos, cur) = (idx.offsets[k], k as u64 * STRIDE + 1);
            drop(guard);
            return scan(&mut f, pos, cur, line, |_, _| {});
        }
        // Beyond it: scan from its end, extending the index as we go.
        let (pos, cur) = (idx.scanned, idx.next_line);
        let found = scan(&mut f, pos, cur, line, |at, l| {
            if (l - 1) % STRIDE == 0 && ((l - 1) / STRIDE) as usize == idx.offsets.len() {
                idx.offsets.push(at);
            }
            idx.scanned = at;
            idx.next_line = l;
        })?;
        Ok(found)
    }
}

/// Reads from `pos` (the start of line `cur`) until line `want` starts or the complete lines end;
/// `seen(offset, line)` is called for every line start found.
fn scan(f: &mut File, mut pos: u64, mut cur: u64, want: u64, mut seen: impl FnMut(u64, u64)) -> io::Result<(u64, u64)> {
    if cur >= want {
        return Ok((pos, cur));
    }
    f.seek(SeekFrom::Start(pos))?;
    let mut buf = vec![0u8; 1 << 18];
    let mut line_start = pos;
    loop {
        // A long scan gives way between chunks, so the threads serving other streams on this core
        // run as soon as they are ready instead of after the scan's time slice.
        std::thread::yield_now();
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((line_start, cur));
        }
        for nl in memchr::memchr_iter(b'\n', &buf[..n]) {
            cur += 1;
            line_start = pos + nl as u64 + 1;
            seen(line_start, cur);
            if cur == want {
                return Ok((line_start, cur));
            }
        }
        pos += n as u64;
    }
}

/// Complete lines read, each with its 1-based ordinal (without the `\n`).
pub type Lines = Vec<(u64, Vec<u8>)>;
/// Complete lines read, each with its ordinal and the byte offset where it starts.
pub type LinesAt = Vec<(u64, u64, Vec<u8>)>;

/// A reader positioned at a line ordinal of a file.
pub struct Tail {
    path: PathBuf,
    file: Option<File>,
    ino: u64,
    /// Byte offset of the next unread byte.
    offset: u64,
    /// Ordinal of the next complete line to return.
    next_line: u64,
    /// Bytes of an incomplete last line.
    partial: Vec<u8>,
    /// Where the next line to return starts (the incomplete line's first byte).
    line_start: u64,
    /// The read buffer, reused across reads (one per stream: it bounds a stream's memory).
    buf: Vec<u8>,
}

/// What a read found besides lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailState {
    /// Still there (maybe not yet created).
    Open,
    /// The file existed and is gone, replaced, or shorter than what was read.
    Vanished,
}

impl Tail {
    /// A tail whose first returned line will be `line` (1-based). The file may not exist yet.
    pub fn at_line(index: &LineIndex, path: &Path, line: u64) -> io::Result<Tail> {
        let mut t = Tail {
            path: path.to_path_buf(),
            file: None,
            ino: 0,
            offset: 0,
            next_line: 1,
            partial: Vec::new(),
            line_start: 0,
            buf: Vec::new(),
        };
        match index.offset_of(path, line) {
            Ok((off, cur)) => {
                let f = File::open(path)?;
                t.ino = f.metadata()?.ino();
                t.file = Some(f);
                t.offset = off;
                t.line_start = off;
                t.next_line = cur;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(t)
    }

    /// A tail whose first returned line is `line`, known to start at byte `offset` (where an earlier
    /// reader stopped: no scan for it). The file may not exist yet.
    pub fn at_offset(path: &Path, offset: u64, line: u64) -> Tail {
        Tail {
            path: path.to_path_buf(),
            file: None,
            ino: 0,
            offset,
            next_line: line.max(1),
            partial: Vec::new(),
            line_start: offset,
            buf: Vec::new(),
        }
    }

    /// Where the next line this tail will return starts.
    pub fn next_offset(&self) -> u64 {
        self.line_start
    }

    /// Bytes read so far (a line longer than one read moves this, not `next_offset`).
    pub fn read_offset(&self) -> u64 {
        self.offset
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Ordinal of the next line this tail will return.
    pub fn next_line(&self) -> u64 {
        self.next_line
    }

    /// Reads what is available now (at most ~`max` bytes) and returns the complete lines with their
    /// ordinals (each line without its `\n`).
    pub fn read_available(&mut self, max: usize) -> io::Result<(Lines, TailState)> {
        let (lines, state) = self.read_available_at(max)?;
        Ok((lines.into_iter().map(|(n, _, l)| (n, l)).collect(), state))
    }

    /// `read_available`, with where each line starts in the file (a giant line cut at
    /// `MAX_LINE` keeps its true start, and the next line its own).
    pub fn read_available_at(&mut self, max: usize) -> io::Result<(LinesAt, TailState)> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(f) => {
                    self.ino = f.metadata()?.ino();
                    self.file = Some(f);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), TailState::Open)),
                Err(e) => return Err(e),
            }
        }
        // Gone or replaced (a log is append-only: anything else ends the stream).
        match std::fs::metadata(&self.path) {
            Ok(m) if m.ino() == self.ino && m.len() >= self.offset => {}
            Ok(_) => return Ok((Vec::new(), TailState::Vanished)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), TailState::Vanished)),
            Err(e) => return Err(e),
        }
        let f = self.file.as_mut().expect("opened above");
        f.seek(SeekFrom::Start(self.offset))?;
        self.buf.resize(max.max(4096), 0);
        let n = f.read(&mut self.buf)?;
        let buf = &self.buf[..n];
        let read_at = self.offset;
        self.offset += n as u64;
        let mut lines = Vec::new();
        let mut start = 0;
        // A line is held at most MAX_LINE bytes: past that it is cut (it keeps its ordinal, and
        // reads as the not-JSON line it now is), so one giant line never fills memory.
        let held = |have: usize, more: &[u8]| more.len().min(MAX_LINE.saturating_sub(have));
        for nl in memchr::memchr_iter(b'\n', buf) {
            let mut line = std::mem::take(&mut self.partial);
            let part = &buf[start..nl];
            line.extend_from_slice(&part[..held(line.len(), part)]);
            lines.push((self.next_line, self.line_start, line));
            self.next_line += 1;
            start = nl + 1;
            self.line_start = read_at + start as u64;
        }
        let rest = &buf[start..];
        let keep = held(self.partial.len(), rest);
        self.partial.extend_from_slice(&rest[..keep]);
        Ok((lines, TailState::Open))
    }
}

/// The bytes of `path` from byte `from` to `upto` (its end when `None`); empty when it cannot be
/// read. Only the new part of a file that grows: never the whole file again.
pub fn read_from(path: &Path, from: u64, upto: Option<u64>) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(path)
        && f.seek(SeekFrom::Start(from)).is_ok()
    {
        let _ = match upto {
            Some(end) => f.take(end.saturating_sub(from)).read_to_end(&mut buf),
            None => f.read_to_end(&mut buf),
        };
    }
    buf
}

/// How much of a file the bounded readers hold at once.
pub const CHUNK: usize = 256 * 1024;

/// The longest line the bounded readers hand on; a longer one is skipped whole (no engine line of
/// interest is that long: a usage, result or rate-limit line is a few KiB).
pub const MAX_LINE: usize = 8 << 20;

/// Calls `on_line` with each complete line (without its newline) of `path` between byte `from`
/// and `upto`, reading `CHUNK` bytes at a time: memory stays bounded by `CHUNK + MAX_LINE`
/// whatever the file's size. A line longer than `MAX_LINE` is skipped. Returns the offset just past
/// the last complete line seen (`from` when none): a last line without its newline is left for the
/// next look.
pub fn each_line(path: &Path, from: u64, upto: u64, mut on_line: impl FnMut(&[u8])) -> u64 {
    let Ok(mut f) = File::open(path) else { return from };
    if upto <= from || f.seek(SeekFrom::Start(from)).is_err() {
        return from;
    }
    let mut f = f.take(upto - from);
    let mut chunk = vec![0u8; CHUNK];
    let (mut line, mut skipping) = (Vec::new(), false);
    let (mut pos, mut done) = (from, from);
    loop {
        let n = match f.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', &chunk[..n]) {
            if !skipping && line.len() + (nl - start) <= MAX_LINE {
                if line.is_empty() {
                    on_line(&chunk[start..nl]);
                } else {
                    line.extend_from_slice(&chunk[start..nl]);
                    on_line(&line);
                }
            }
            line.clear();
            skipping = false;
            start = nl + 1;
            done = pos + nl as u64 + 1;
        }
        if !skipping {
            line.extend_from_slice(&chunk[start..n]);
            if line.len() > MAX_LINE {
                line = Vec::new();
                skipping = true;
            }
        }
        pos += n as u64;
    }
    done
}

/// The last complete lines of `path` from byte `from` on, at most `budget` bytes of them (older
/// lines dropped first), newline-separated: what a check of a turn's end reads, bounded however
/// long the turn ran.
pub fn last_lines(path: &Path, from: u64, budget: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    // Only the file's last `budget` bytes are read: a line cut by that start is not whole.
    let start = from.max(len.saturating_sub(budget as u64));
    let mut cut = false;
    if start > from {
        let mut b = [0u8; 1];
        cut = File::open(path).and_then(|f| f.read_exact_at(&mut b, start - 1)).map_or(true, |_| b[0] != b'\n');
    }
    let mut kept: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
    let mut size = 0usize;
    each_line(path, start, len, |l| {
        if std::mem::take(&mut cut) {
            return;
        }
        if l.len() + 1 > budget {
            return;
        }
        size += l.len() + 1;
        kept.push_back(l.to_vec());
        while size > budget {
            size -= kept.pop_front().map_or(0, |d| d.len() + 1);
        }
    });
    let mut out = Vec::with_capacity(size);
    for l in kept {
        out.extend_from_slice(&l);
        out.push(b'\n');
    }
    out
}

/// One inotify watcher for the whole process: streams subscribe to a path and get a wake-up
/// whenever something in its directory changes. Without inotify, subscribers fall back to polling.
pub struct WatchHub {
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
    senders: Arc<Mutex<HashMap<PathBuf, broadcast::Sender<()>>>>,
    watched_dirs: Mutex<HashMap<PathBuf, usize>>,
}

impl Default for WatchHub {
    fn default() -> Self {
        Self::new()
    }
}

impl WatchHub {
    pub fn new() -> WatchHub {
        let senders: Arc<Mutex<HashMap<PathBuf, broadcast::Sender<()>>>> = Arc::default();
        let s2 = senders.clone();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let Ok(ev) = res else { return };
            // Opening or reading a file changes nothing in it: a reader woken by its own (or
            // another reader's) opens would read again and again for nothing.
            if matches!(ev.kind, notify::EventKind::Access(a) if !matches!(a, notify::event::AccessKind::Close(notify::event::AccessMode::Write))) {
                return;
            }
            let senders = s2.lock().unwrap_or_else(|p| p.into_inner());
            for p in &ev.paths {
                if let Some(tx) = senders.get(p) {
                    let _ = tx.send(());
                }
            }
        })
        .map_err(|e| tracing::warn!(error = %e, "inotify unavailable: log streams poll instead"))
        .ok();
        WatchHub { watcher: Mutex::new(watcher), senders, watched_dirs: Mutex::new(HashMap::new()) }
    }

    /// Wake-ups for `path` (its directory is watched; the file may not exist yet). `None` when
    /// watching is unavailable: poll.
    pub fn subscribe(&self, path: &Path) -> Option<broadcast::Receiver<()>> {
        use notify::Watcher;
        let dir = path.parent()?.to_path_buf();
        let mut w = self.watcher.lock().unwrap_or_else(|p| p.into_inner());
        let watcher = w.as_mut()?;
        let mut dirs = self.watched_dirs.lock().unwrap_or_else(|p| p.into_inner());
        if !dirs.contains_key(&dir) {
            if let Err(e) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot watch; polling");
                return None;
            }
            dirs.insert(dir.clone(), 0);
        }
        *dirs.get_mut(&dir).expect("inserted") += 1;
        let mut senders = self.senders.lock().unwrap_or_else(|p| p.into_inner());
        Some(senders.entry(path.to_path_buf()).or_insert_with(|| broadcast::channel(16).0).subscribe())
    }
}

#[cfg(test)]
mod bounded_tests {
    use super::*;

    #[test]
    fn each_line_hands_on_every_complete_line_across_chunks_and_skips_a_giant_one() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        let mut text = Vec::new();
        let long = "x".repeat(CHUNK + 10);
        text.extend_from_slice(format!("a\n{long}\nb\n").as_bytes());
        text.extend(std::iter::repeat_n(b'y', MAX_LINE + 1));
        text.extend_from_slice(b"\nc\npartial");
        std::fs::write(&p, &text).unwrap();
        let mut got = Vec::new();
        let end = each_line(&p, 0, text.len() as u64, |l| got.push(l.len()));
        assert_eq!(got, vec![1, CHUNK + 10, 1, 1], "the giant line skipped, the partial one held");
        assert_eq!(end, text.len() as u64 - "partial".len() as u64);
        assert_eq!(last_lines(&p, 0, 12), b"c\n", "the last 12 bytes: a cut line, c, a partial one");
        std::fs::write(&p, b"one\ntwo\nthree\n").unwrap();
        assert_eq!(last_lines(&p, 0, 8), b"three\n", "a line cut by the start is dropped");
        assert_eq!(last_lines(&p, 0, 10), b"two\nthree\n", "a start on a line's first byte keeps it");
        assert_eq!(last_lines(&p, 0, 14), b"one\ntwo\nthree\n");
        assert_eq!(last_lines(&p, 8, 100), b"three\n", "from an offset");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn offsets_and_partial_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        let mut f = File::create(&p).unwrap();
        for i in 1..=10_000 {
            writeln!(f, "line {i}").unwrap();
        }
        write!(f, "partial").unwrap();
        let idx = LineIndex::default();
        for want in [1u64, 2, 4096, 4097, 8193, 9999, 10_000] {
            let mut t = Tail::at_line(&idx, &p, want).unwrap();
            let (lines, _) = t.read_available(64).unwrap();
            assert_eq!(lines[0].0, want);
            assert_eq!(lines[0].1, format!("line {want}").into_bytes());
        }
        // Past the end: starts at the end and waits; the partial line is held back.
        let mut t = Tail::at_line(&idx, &p, 10_001).unwrap();
        assert_eq!(t.next_line(), 10_001);
        assert!(t.read_available(1 << 20).unwrap().0.is_empty());
        writeln!(f, " done").unwrap();
        let (lines, _) = t.read_available(1 << 20).unwrap();
        assert_eq!(lines, vec![(10_001, b"partial done".to_vec())]);
        // The index answers again from its cache.
        let mut t = Tail::at_line(&idx, &p, 5000).unwrap();
        assert_eq!(t.read_available(64).unwrap().0[0].1, b"line 5000".to_vec());
        std::fs::remove_file(&p).unwrap();
        assert_eq!(t.read_available(64).unwrap().1, TailState::Vanished);
    }

    #[test]
    fn a_giant_line_is_cut_at_max_line_and_keeps_its_ordinal() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        let mut text = vec![b'x'; MAX_LINE + 1000];
        text.extend_from_slice(b"\nok\n");
        std::fs::write(&p, &text).unwrap();
        let idx = LineIndex::default();
        let mut t = Tail::at_line(&idx, &p, 1).unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            let (lines, _) = t.read_available(1 << 20).unwrap();
            got.extend(lines);
        }
        assert_eq!((got[0].0, got[0].1.len()), (1, MAX_LINE));
        assert_eq!(got[1], (2, b"ok".to_vec()));
    }
}
