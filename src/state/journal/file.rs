//! Appending to a journal: validate the record, take the file's `flock`, catch the cached fold up to
//! the file's end, check the transition (and any caller's check) against it, write one line with one
//! `write(2)`, fdatasync, and roll back a short write. Replay lives in `fold`.

use super::fold::fold_bytes;
use super::{Body, JournalError, Record, RunView, TaskState, validate_shape};
use crate::os::flock::Flock;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// An open journal for appending. Keeps a fold of what it has seen, extended incrementally under the
/// lock, so validating an append costs only the bytes other writers added since.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Fold of bytes `[0, offset)`, all complete lines, plus the next line number.
    cache: Mutex<(RunView, u64, u64)>,
    /// fdatasync after each append (on by default; `HARNESS_JOURNAL_FSYNC=0` turns it off for tests
    /// that hammer the journal).
    sync: bool,
}

impl Journal {
    /// Opens (creating, mode 0600) the journal for appending.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| JournalError::Io { path: path.to_path_buf(), source })?;
        let sync = std::env::var("HARNESS_JOURNAL_FSYNC").map(|v| v != "0").unwrap_or(true);
        Ok(Journal { path: path.to_path_buf(), file, cache: Mutex::new((RunView::default(), 0, 1)), sync })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: io::Error) -> JournalError {
        JournalError::Io { path: self.path.clone(), source }
    }

    /// Brings the cached fold up to the file's current end. Call with the flock held.
    fn catch_up(&self, cache: &mut (RunView, u64, u64)) -> Result<u64, JournalError> {
        let len = self.file.metadata().map_err(|e| self.io(e))?.len();
        if len < cache.1 {
            // Truncated under us (hand edit or a rolled-back write we did not see): refold from zero.
            *cache = (RunView::default(), 0, 1);
        }
        if len > cache.1 {
            let mut buf = Vec::with_capacity((len - cache.1) as usize);
            let mut f = &self.file;
            f.seek(SeekFrom::Start(cache.1)).map_err(|e| self.io(e))?;
            f.take(len - cache.1).read_to_end(&mut buf).map_err(|e| self.io(e))?;
            let (consumed, next_line) = fold_bytes(&mut cache.0, &buf, cache.2);
            cache.1 += consumed as u64;
            cache.2 = next_line;
        }
        Ok(len)
    }

    /// The current fold (complete lines only), read under the lock.
    pub fn view(&self) -> Result<RunView, JournalError> {
        let _g = Flock::exclusive(&self.file).map_err(|e| self.io(e))?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        self.catch_up(&mut cache)?;
        Ok(cache.0.clone())
    }

    /// Validates and appends one record; returns its 1-based line number. The record is on disk (and
    /// fdatasync'd unless disabled) when this returns Ok.
    pub fn append(&self, rec: &Record) -> Result<u64, JournalError> {
        self.append_checked(rec, |_| Ok(()))
    }

    /// Like `append`, but first runs `check` against the up-to-date fold under the lock: a verb that
    /// depends on state (steer on a committed task) is decided and recorded atomically.
    pub fn append_checked(
        &self,
        rec: &Record,
        check: impl FnOnce(&RunView) -> Result<(), JournalError>,
    ) -> Result<u64, JournalError> {
        validate_shape(rec)?;
        let _g = Flock::exclusive(&self.file).map_err(|e| self.io(e))?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let len = self.catch_up(&mut cache)?;
        check(&cache.0)?;
        if let Body::Task(t) = &rec.body {
            let from = cache.0.state_of(&t.task);
            if !TaskState::can_move(from, t.state) {
                let from = from.map(|s| s.as_str().to_string()).unwrap_or_else(|| "(none)".into());
                return Err(JournalError::Transition { task: t.task.clone(), from, to: t.state });
            }
        }
        let mut line = Vec::with_capacity(256);
        // A torn tail (crash mid-write) gets closed so this record starts on a fresh line.
        let torn = len > cache.1;
        if torn {
            let mut last = [0u8; 1];
            self.file.read_exact_at(&mut last, len - 1).map_err(|e| self.io(e))?;
            if last[0] != b'\n' {
                line.push(b'\n');
            }
        }
        serde_json::to_writer(&mut line, rec).map_err(|e| JournalError::Invalid(e.to_string()))?;
        line.push(b'\n');
        let written = (&self.file).write(&line);
        match written {
            Ok(n) if n == line.len() => {}
            Ok(n) => {
                let _ = self.file.set_len(len);
                return Err(self.io(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write ({n} of {} bytes), rolled back", line.len()),
                )));
            }
            Err(e) => {
                let _ = self.file.set_len(len);
                return Err(self.io(e));
            }
        }
        if self.sync
            && let Err(e) = self.file.sync_data()
        {
            let _ = self.file.set_len(len);
            return Err(self.io(e));
        }
        let _ = self.catch_up(&mut cache)?;
        Ok(cache.2 - 1)
    }
}
