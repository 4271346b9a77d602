//! Exit codes, named once: the codes a turn, gate or review ends with (what the journal's `rc`
//! holds, following the shell's conventions) and the `harness` command's own. Constants only.

/// A turn or gate cut by its timeout (`timeout(1)`'s code).
pub const TIMED_OUT: i32 = 124;
/// The wrapper, gate or reviewer could not be started (the shell's "command not found").
pub const NOT_RUN: i32 = 127;
/// A turn lost with its supervisor: as if SIGKILLed (128 + 9).
pub const LOST: i32 = 137;
/// A turn ended by a kill verb: SIGTERM to its group (128 + 15).
pub const KILLED: i32 = 143;

/// The `harness` command's exit codes (README "Exit codes").
pub mod cli {
    /// The operation failed or was refused (message on stderr).
    pub const FAILED: i32 = 1;
    /// Usage error: bad arguments or ids.
    pub const USAGE: i32 = 2;
    /// `journal reconcile` found discrepancies.
    pub const DISCREPANCIES: i32 = 3;
    /// The API could not be reached.
    pub const UNREACHABLE: i32 = 4;
}
