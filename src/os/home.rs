//! The `$HARNESS_HOME` layout (default `~/.harness`): `runs/` (the global registry), `sock/` (control
//! sockets), permissions (dirs 0700, files 0600), the Unix socket path limit, and the one way every
//! small state file is written (temp file + fsync + rename).
//!
//! This module knows where things live, never what is in them.

use crate::ids::RunId;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Longest Unix socket path the OS accepts, excluding the terminating NUL (sun_path is 108 bytes on
/// Linux, 104 on macOS).
#[cfg(target_os = "macos")]
pub const SOCKET_PATH_MAX: usize = 103;
#[cfg(not(target_os = "macos"))]
pub const SOCKET_PATH_MAX: usize = 107;

#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("HARNESS_HOME is not set and there is no HOME to default to ~/.harness")]
    NoHome,
    #[error("cannot create {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error(
        "{path} is owned by uid {owner}, not by you (uid {me}): another user made it first; use a HARNESS_HOME of your own (unset, it is ~/.harness)"
    )]
    Foreign { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{path} is writable by group or others (mode {mode:04o}): another user may have put files in it; if you trust what is in it, `chmod 700 {path}`, else use another HARNESS_HOME"
    )]
    Open { path: PathBuf, mode: u32 },
    #[error("{path} is a symbolic link: harness keeps its sockets and registry in directories of its own")]
    Link { path: PathBuf },
    #[error(
        "control socket path {path} is {len} bytes, over the OS limit of {max}: use a shorter HARNESS_HOME or slug"
    )]
    SocketPathTooLong { path: PathBuf, len: usize, max: usize },
}

/// A resolved harness home directory.
#[derive(Debug, Clone)]
pub struct Home {
    /// Absolute root, e.g. `/home/me/.harness`.
    pub root: PathBuf,
}

impl Home {
    /// `$HARNESS_HOME`, else `$HOME/.harness`.
    pub fn from_env() -> Result<Home, HomeError> {
        if let Some(h) = std::env::var_os("HARNESS_HOME").filter(|h| !h.is_empty()) {
            return Ok(Home { root: PathBuf::from(h) });
        }
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or(HomeError::NoHome)?;
        Ok(Home { root: PathBuf::from(home).join(".harness") })
    }

    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// A stable id of this home: the first 16 hex digits of the sha256 of its canonical path (its
    /// path as given while it does not exist). The API says it in `Harness-Home`, so a CLI that
    /// reached an API over TCP knows whether it serves the home the CLI means.
    pub fn id(&self) -> String {
        use sha2::Digest;
        let path = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    pub fn sock_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    /// The pointer file of a run in the global registry.
    pub fn pointer_path(&self, run: &RunId) -> PathBuf {
        self.runs_dir().join(format!("{run}.json"))
    }

    /// The derived control-socket path of a run: `$HARNESS_HOME/sock/<runId>.sock`.
    /// Where a run's task worktrees live: `worktrees/<runId>/<task>` (outside the user's checkout).
    pub fn worktrees_dir(&self, run: &RunId) -> PathBuf {
        self.root.join("worktrees").join(run.as_str())
    }

    pub fn socket_path(&self, run: &RunId) -> PathBuf {
        self.sock_dir().join(format!("{run}.sock"))
    }

    /// The socket path, refused when it would not fit in `sun_path` (so a run fails at start with this
    /// message instead of at bind time with EINVAL).
    pub fn checked_socket_path(&self, run: &RunId) -> Result<PathBuf, HomeError> {
        let path = self.socket_path(run);
        let len = path.as_os_str().len();
        if len > SOCKET_PATH_MAX {
            return Err(HomeError::SocketPathTooLong { path, len, max: SOCKET_PATH_MAX });
        }
        Ok(path)
    }

    /// Creates `root`, `runs/` and `sock/` with mode 0700, and refuses them when they are not this
    /// user's own: owned by another uid, writable by group or others, or (`runs/`, `sock/`) a
    /// symbolic link. Every command that writes in the home goes through here first.
    pub fn ensure(&self) -> Result<(), HomeError> {
        // Each is judged as found (before it is tightened), then made or tightened to 0700.
        for (d, follow) in [(self.root.clone(), true), (self.runs_dir(), false), (self.sock_dir(), false)] {
            match owned(&d, follow) {
                Err(HomeError::Create { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
                r => r?,
            }
            ensure_private_dir(&d)?;
        }
        Ok(())
    }
}

/// `dir` is this user's: owned by the effective uid and not writable by group or others (a dir of
/// ours that is only readable by them was tightened to 0700 by `ensure_private_dir`). `follow`: the
/// home itself may be a symbolic link to a dir of ours; `runs/` and `sock/` may not.
fn owned(dir: &Path, follow: bool) -> Result<(), HomeError> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.to_path_buf();
    let meta = if follow { fs::metadata(dir) } else { fs::symlink_metadata(dir) };
    let meta = meta.map_err(|source| HomeError::Create { path: path.clone(), source })?;
    if meta.file_type().is_symlink() {
        return Err(HomeError::Link { path });
    }
    let me = crate::os::peer::own_uid();
    if meta.uid() != me {
        return Err(HomeError::Foreign { path, owner: meta.uid(), me });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(HomeError::Open { path, mode });
    }
    Ok(())
}

/// Creates `dir` (and parents) with mode 0700; tightens an existing dir that we own to 0700; a dir
/// of another uid's is refused.
pub fn ensure_private_dir(dir: &Path) -> Result<(), HomeError> {
    private_dir(dir).map_err(|source| HomeError::Create { path: dir.to_path_buf(), source })
}

/// `ensure_private_dir` with a plain I/O error: for the run's own directories (logs, prompts,
/// approvals, worktrees), whose callers name the path themselves.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = fs::metadata(dir)?;
    let me = crate::os::peer::own_uid();
    if meta.uid() != me {
        // Another user's dir (a `runstate/` a co-user made in a shared checkout): what is in it
        // (a plan copy whose gates run as us) is not ours to trust.
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is owned by uid {}, not by you (uid {me})", dir.display(), meta.uid()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Opens `path` for writing (`append`, else truncated), created with mode 0600 and an existing
/// file tightened to 0600: every file harness makes that holds a run's words (logs, prompts, the
/// plan copy, gate and setup output) is its owner's only, whatever the umask.
pub fn open_private(path: &Path, append: bool) -> io::Result<fs::File> {
    use std::os::unix::fs::MetadataExt;
    let f = fs::OpenOptions::new().create(true).write(true).append(append).truncate(!append).mode(0o600).open(path)?;
    // Only a file found looser is tightened (a filesystem without modes, vfat say, refuses a chmod
    // even of what it made).
    if f.metadata()?.mode() & 0o077 != 0 {
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// `open_private` then writes `bytes` (not atomic: for files only their writer reads back whole).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    open_private(path, false)?.write_all(bytes)
}

/// Writes `bytes` to `path` so a reader sees the old content or the new, never a mix: a temp file in
/// the same directory (mode `mode`), fsync, rename over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, true)
}

/// Like `write_atomic` but without `fsync`: for caches that readers validate (a crash may leave the
/// old content or an empty file, never a mix; both are rebuilt).
pub fn replace_cache(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, false)
}

fn replace(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), unique_suffix()));
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A per-process counter so two threads of one process never share a temp name.
fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Canonical absolute form of a directory that must exist (symlinks resolved), with a message naming it.
pub fn canonical_dir(dir: &Path) -> io::Result<PathBuf> {
    let c = fs::canonicalize(dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    if !c.is_dir() {
        return Err(io::Error::new(io::ErrorKind::NotADirectory, format!("{} is not a directory", c.display())));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Slug;

    #[test]
    fn socket_path_limit_is_checked() {
        let slug = Slug::parse(&"s".repeat(48)).unwrap();
        let run = RunId::derive(Path::new("/r"), Path::new("/r"), &slug);
        let short = Home::at("/tmp/h");
        assert!(short.checked_socket_path(&run).is_ok());
        let long = Home::at(format!("/tmp/{}", "x".repeat(60)));
        let err = long.checked_socket_path(&run).unwrap_err().to_string();
        assert!(err.contains("over the OS limit"), "{err}");
    }

    #[test]
    fn atomic_write_sets_mode_and_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "temp file left behind");
    }
}
