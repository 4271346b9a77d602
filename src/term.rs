//! Writing to the terminal: one line, pretty JSON, raw text, a daemon's "listening on" notice. A
//! closed stdout (`harness … | head`) ends a command quietly instead of panicking like `println!`.
//! No business logic.

use std::io::Write;

/// Prints one line to stdout; a closed pipe ends the process quietly.
pub fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
        std::process::exit(0);
    }
}

/// Prints text as it is (no newline added); a closed pipe ends the process quietly.
pub fn out_raw(text: &str) {
    let mut o = std::io::stdout().lock();
    if o.write_all(text.as_bytes()).and_then(|_| o.flush()).is_err() {
        std::process::exit(0);
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
