//! Writing to the terminal: one line, pretty JSON, raw text, a daemon's "listening on" notice. A
//! closed stdout (`harness … | head`) ends a command quietly instead of panicking like `println!`
//! — or, for a command whose work goes on without a reader (a batch run), only its printing.
//! No business logic.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// A closed stdout ends only the printing, not the process (`outlive_stdout`).
static OUTLIVE: AtomicBool = AtomicBool::new(false);
/// Stdout was found closed while `OUTLIVE`: nothing more is written to it.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// From now on a closed stdout stops this process's printing, not its work: what a run in this
/// process asks (`harness run plan.json | head -3` must not end the run). SIGPIPE is no threat:
/// Rust ignores it in its programs, so a write to a closed pipe is an EPIPE error, handled here.
pub fn outlive_stdout() {
    OUTLIVE.store(true, Ordering::Relaxed);
}

/// A write to stdout failed (its reader is gone): the process ends quietly, or only its printing.
fn stdout_closed() {
    if !OUTLIVE.load(Ordering::Relaxed) {
        std::process::exit(0);
    }
    CLOSED.store(true, Ordering::Relaxed);
}

/// Prints one line to stdout; a closed pipe ends the process quietly (see `outlive_stdout`).
pub fn out(line: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
        stdout_closed();
    }
}

/// Prints text as it is (no newline added); a closed pipe ends the process quietly (see
/// `outlive_stdout`).
pub fn out_raw(text: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if o.write_all(text.as_bytes()).and_then(|_| o.flush()).is_err() {
        stdout_closed();
    }
}

/// Prints a value as pretty JSON.
pub fn print_json(v: &impl serde::Serialize) {
    out(&serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Tells whoever started a daemon where it listens; a closed stdout is not the daemon's problem.
pub fn announce(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|_| o.flush());
}
