//! `Adapter`: which engine a task runs on (claude, cursor, codex), and the facts that follow from it —
//! its wrapper script, its stream dialect, and whether it is a verdict seat (codex: observable and
//! killable, never steered).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Adapter {
    Claude,
    Cursor,
    Codex,
}

impl Adapter {
    pub const ALL: [Adapter; 3] = [Adapter::Claude, Adapter::Cursor, Adapter::Codex];

    pub fn as_str(self) -> &'static str {
        match self {
            Adapter::Claude => "claude",
            Adapter::Cursor => "cursor",
            Adapter::Codex => "codex",
        }
    }

    /// The wrapper script (under `wrappers/`) that dispatches a turn on this engine.
    pub fn wrapper(self) -> &'static str {
        match self {
            Adapter::Claude => "na.sh",
            Adapter::Cursor => "ca.sh",
            Adapter::Codex => "codex.sh",
        }
    }

    /// Codex runs as a review/verdict seat: steering a verdict is meaningless (409), kill is allowed.
    pub fn is_verdict_seat(self) -> bool {
        self == Adapter::Codex
    }
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Adapter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "claude" => Ok(Adapter::Claude),
            "cursor" => Ok(Adapter::Cursor),
            "codex" => Ok(Adapter::Codex),
            other => Err(format!("unknown adapter {other:?}: expected claude, cursor or codex")),
        }
    }
}
