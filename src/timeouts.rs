//! Every fixed timeout of the crate that is not a user's flag, named once with why it is that long.
//! (The flags' defaults — kill grace, linger, turn and gate timeouts — live with the flags in `cli`.)
//! Constants only.

use std::time::Duration;

/// Connecting to a supervisor's control socket: a live one accepts at once.
pub const CONTROL_CONNECT: Duration = Duration::from_secs(2);
/// The API waiting for a supervisor's answer to a verb (a kill: the run's kill grace plus
/// `KILL_ANSWER_MARGIN`, as a kill answers once the task's group is gone). No answer within it is a
/// 504: the verb was delivered and may have been acted on.
pub const VERB_ANSWER: Duration = Duration::from_secs(10);
/// What a kill's answer may take beyond the run's kill grace (the KILL, the reap, the journal).
pub const KILL_ANSWER_MARGIN: Duration = Duration::from_secs(10);
/// The CLI's own control-socket verbs (`harness stop`, `harness status`).
pub const CLI_CONTROL_ANSWER: Duration = Duration::from_secs(30);
/// The demo's `stop` of its run when it exits.
pub const DEMO_STOP: Duration = Duration::from_secs(10);
/// A supervisor waits this long for answers it gave to be written before it exits.
pub const ANSWER_DRAIN: Duration = Duration::from_secs(2);
/// Watchdog period when the service manager sets none.
pub const SUPERVISOR_WATCHDOG: Duration = Duration::from_secs(10);
/// The API's status/watchdog period when the service manager sets none.
pub const API_WATCHDOG: Duration = Duration::from_secs(5);
/// In-flight HTTP responses get this long to finish on shutdown.
pub const API_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// A client gets this long to send its request head (slowloris defence).
pub const HEADER_READ: Duration = Duration::from_secs(10);
/// The CLI's HTTP connect.
pub const CLIENT_CONNECT: Duration = Duration::from_secs(5);
/// A detached supervisor must open its socket within this long.
pub const SUPERVISOR_START: Duration = Duration::from_secs(15);
/// Waiting for git's `index.lock` to go away (a commit of a dead supervisor may still be finishing).
pub const INDEX_LOCK_WAIT: Duration = Duration::from_secs(30);
/// How long a git lock in a task's own worktree may stand before it is taken for one a killed git
/// left (nobody but the task writes there, and its turn is over).
pub const STALE_LOCK_WAIT: Duration = Duration::from_secs(2);
/// After SIGKILL, how long a process group gets to disappear.
pub const KILL_REAP: Duration = Duration::from_secs(2);
/// Reading what a finished child wrote to stdout (a descendant may hold the pipe open).
pub const CHILD_STDOUT: Duration = Duration::from_secs(2);

/// The supervisor's defaults (`supervisor::Options::default()` and the CLI's flags both read these).
/// TERM → KILL grace when killing a task's process group.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long a supervisor with nothing to do stays up before ending the run failed.
pub const LINGER: Duration = Duration::from_secs(30 * 60);
/// Bound of one agent turn.
pub const TURN: Duration = Duration::from_secs(3600);
/// Bound of one gate command.
pub const GATE: Duration = Duration::from_secs(1800);
