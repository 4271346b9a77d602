//! Where the API is and what secret it takes: the address (`$HARNESS_API_ADDR`, default
//! 127.0.0.1:7878) and the bearer token (`$HARNESS_API_TOKEN`, else `$HARNESS_HOME/api.token`, which
//! must be mode 0600). One policy, read by the server and the CLI alike. Reads the environment and
//! the token file; writes nothing.

use crate::os::home::Home;
use std::net::SocketAddr;
use std::path::PathBuf;

/// harness's own secrets in an environment: the API token and the NATS credentials (a relay's or a
/// fleet API's). No step that runs code the agent may have written (a gate, `setup`) gets them;
/// the wrappers' allowlist keeps them from the engines already.
pub const SECRET_VARS: &[&str] = &[
    "HARNESS_API_TOKEN",
    "HARNESS_NATS_USER",
    "HARNESS_NATS_PASSWORD",
    "HARNESS_NATS_TOKEN",
    "HARNESS_NATS_NKEY",
    "HARNESS_NATS_CREDS",
    "HARNESS_NATS_KEY",
];

/// Harness's own secrets leave a supervisor before it starts anything: the wrappers, engines, gates,
/// setup commands and git hooks it starts inherit none of them, and (Linux) the process is made
/// non-dumpable, so a process of the same uid — an agent — cannot read the environment it was
/// started with from `/proc/<pid>/environ` (which `unsetenv` does not clear). A supervisor needs
/// none of them. Called before the supervisor's runtime starts its threads.
pub fn forget_secrets() {
    for name in SECRET_VARS {
        if std::env::var_os(name).is_some() {
            // SAFETY: called on the main thread before the supervisor's runtime (or any thread that
            // reads the environment) is started.
            unsafe { std::env::remove_var(name) };
        }
    }
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot make the supervisor non-dumpable: its environment stays readable by its uid");
    }
}

/// The API's address when nothing else is said.
pub const DEFAULT_API_ADDR: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7878);

/// Why the configuration cannot be used. Each names the variable or file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("HARNESS_API_ADDR {value:?}: {reason}")]
    BadAddr { value: String, reason: String },
    #[error("{} is mode {mode:o}: others can read it; chmod 600 {}", path.display(), path.display())]
    LooseToken { path: PathBuf, mode: u32 },
    #[error("{} is empty", path.display())]
    EmptyToken { path: PathBuf },
    #[error("cannot read the token {}: {reason}", path.display())]
    UnreadableToken { path: PathBuf, reason: String },
    #[error("{} is owned by uid {owner}, not by you (uid {me}): remove it and let `harness api` make your own", path.display())]
    ForeignToken { path: PathBuf, owner: u32, me: u32 },
    #[error("{} is a symbolic link: the token must be a file of its own (remove the link)", path.display())]
    LinkedToken { path: PathBuf },
    #[error("cannot create the token {}: {reason}", path.display())]
    CannotCreate { path: PathBuf, reason: String },
}

/// The default API address: `$HARNESS_API_ADDR` or 127.0.0.1:7878.
pub fn api_addr() -> Result<SocketAddr, ConfigError> {
    match std::env::var("HARNESS_API_ADDR") {
        Ok(s) if !s.is_empty() => {
            s.parse().map_err(|e: std::net::AddrParseError| ConfigError::BadAddr { value: s, reason: e.to_string() })
        }
        _ => Ok(DEFAULT_API_ADDR),
    }
}

/// The token file of a home.
pub fn token_path(home: &Home) -> PathBuf {
    home.root.join("api.token")
}

/// The API token, made when none is configured: 256 random bits from the OS, hex, written to
/// `$HARNESS_HOME/api.token` (mode 0600, created exclusively: a concurrent creator's token wins).
pub fn ensure_api_token(home: &Home) -> Result<String, ConfigError> {
    if let Some(t) = api_token(home)? {
        return Ok(t);
    }
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = token_path(home);
    let fail = |e: &dyn std::fmt::Display| ConfigError::CannotCreate { path: path.clone(), reason: e.to_string() };
    home.ensure().map_err(|e| fail(&e))?;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).map_err(|e| fail(&e))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
        Ok(mut f) => {
            f.write_all(format!("{token}\n").as_bytes()).and_then(|_| f.sync_all()).map_err(|e| fail(&e))?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            api_token(home)?.ok_or_else(|| ConfigError::EmptyToken { path: path.clone() })
        }
        Err(e) => Err(fail(&e)),
    }
}

/// The API token: `$HARNESS_API_TOKEN`, else `$HARNESS_HOME/api.token` (refused unless mode 0600).
pub fn api_token(home: &Home) -> Result<Option<String>, ConfigError> {
    if let Ok(t) = std::env::var("HARNESS_API_TOKEN")
        && !t.trim().is_empty()
    {
        return Ok(Some(t.trim().to_string()));
    }
    let path = token_path(home);
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // O_NOFOLLOW: a link planted in the home's place never makes us read (and serve) another file.
    // O_NONBLOCK: a FIFO planted in its place does not hang the read.
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let mut f = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(ConfigError::LinkedToken { path }),
        Err(e) => return Err(ConfigError::UnreadableToken { path, reason: e.to_string() }),
    };
    let meta = f.metadata().map_err(|e| ConfigError::UnreadableToken { path: path.clone(), reason: e.to_string() })?;
    if !meta.is_file() {
        return Err(ConfigError::UnreadableToken { path, reason: "not a regular file".into() });
    }
    let me = crate::os::peer::own_uid();
    if meta.uid() != me {
        return Err(ConfigError::ForeignToken { path, owner: meta.uid(), me });
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ConfigError::LooseToken { path, mode });
    }
    let mut t = String::new();
    // A token is 65 bytes; a file far past that is not one.
    f.by_ref()
        .take(4096)
        .read_to_string(&mut t)
        .map_err(|e| ConfigError::UnreadableToken { path: path.clone(), reason: e.to_string() })?;
    let t = t.trim().to_string();
    if t.is_empty() {
        return Err(ConfigError::EmptyToken { path });
    }
    Ok(Some(t))
}
