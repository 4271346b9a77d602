//! `CliError`: how a command failed, and the exit code each way maps to (`exit::cli`). There is no
//! blanket conversion: every error is built where it happens, naming the operation and the path or
//! id involved, so the one line on stderr says what to look at.

use crate::exit;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad arguments or ids (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The operation failed or was refused (exit 1).
    #[error("{0}")]
    Failed(String),
    /// `journal reconcile` found discrepancies (exit 3).
    #[error("journal reconcile found discrepancies")]
    Discrepancies,
    /// The API could not be reached (exit 4): why, then what to do (said once: the cause's own
    /// remedy, else the general one).
    #[error("{}; {}", .0, .0.remedy.as_deref().unwrap_or("start it with `harness api`, or pass --api ADDR"))]
    Unreachable(#[from] crate::client::Unreachable),
}

impl CliError {
    pub fn code(&self) -> i32 {
        match self {
            CliError::Usage(_) => exit::cli::USAGE,
            CliError::Failed(_) => exit::cli::FAILED,
            CliError::Discrepancies => exit::cli::DISCREPANCIES,
            CliError::Unreachable(_) => exit::cli::UNREACHABLE,
        }
    }
}

/// A usage error from anything that says what is wrong.
pub fn usage(e: impl std::fmt::Display) -> CliError {
    CliError::Usage(e.to_string())
}

/// `what` failed because of `e`: "what: e".
pub fn failed(what: impl std::fmt::Display, e: impl std::fmt::Display) -> CliError {
    CliError::Failed(format!("{what}: {e}"))
}

/// For `map_err`: the operation `what` failed.
pub fn during<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> CliError {
    move |e| failed(what, e)
}
