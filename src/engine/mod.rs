//! The engines a task runs on (claude, cursor, codex) and everything harness knows of each, in one
//! place: `Adapter` and its capabilities (the rest of the crate asks these, never compares
//! variants: tidy holds it), and one submodule per engine with its stream dialect and rate-limit
//! reading; `normalize` (the dispatch and the shared event mapping), `usage` (the spend fold) and
//! `ratelimit` dispatch to them. Everything here is pure (tidy): no I/O, clock or global.
//!
//! A new engine is a variant here plus a submodule; the compiler lists the matches that lack it.

pub mod claude;
pub mod codex;
pub mod cursor;
pub mod failure;
pub mod normalize;
pub mod ratelimit;
pub mod usage;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Adapter {
    Claude,
    Cursor,
    Codex,
}

impl Adapter {
    pub const ALL: [Adapter; 3] = [Adapter::Claude, Adapter::Cursor, Adapter::Codex];

    /// The wire name (serde's).
    pub fn as_str(self) -> &'static str {
        crate::wire::name_of(&self)
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
        matches!(self, Adapter::Codex)
    }

    /// The engine that reviews a task (`review: true`): the verdict seat.
    pub const REVIEWER: Adapter = Adapter::Codex;

    /// The engine a journaled task falls back to when its plan no longer names it.
    pub const DEFAULT: Adapter = Adapter::Claude;

    /// harness picks the turn's session id before the turn (claude's `--session-id`), so a kill
    /// before its first token can still be resumed.
    pub fn assigns_session_id(self) -> bool {
        matches!(self, Adapter::Claude)
    }

    /// A turn can run live: its prompt, steers and interrupts written into the running turn
    /// (`live`, `session`).
    pub fn has_live_channel(self) -> bool {
        matches!(self, Adapter::Claude)
    }

    /// Its tool calls can be asked of the operator (`approvals: "ask"`) and limited by rules
    /// (`allowed_tools`, `approve`).
    pub fn asks_permissions(self) -> bool {
        self.permission_env().is_some()
    }

    /// The environment variables through which its wrapper takes the task's permission settings
    /// (`spec/WRAPPER-CONTRACT.md`); `None`: the engine asks no permissions.
    pub fn permission_env(self) -> Option<PermissionEnv> {
        match self {
            Adapter::Claude => Some(PermissionEnv {
                allowed_tools: "HARNESS_CLAUDE_ALLOWED_TOOLS",
                mode: "HARNESS_CLAUDE_PERMISSION_MODE",
                mcp_config: "HARNESS_CLAUDE_PERMISSION_MCP",
            }),
            Adapter::Cursor | Adapter::Codex => None,
        }
    }

    /// Its fake engine under `fixtures/engines/` (a script replaying captured streams), which the
    /// demo and the tests run in its place.
    pub fn fake_engine(self) -> &'static str {
        match self {
            Adapter::Claude => "fake-claude",
            Adapter::Cursor => "fake-cursor-agent",
            Adapter::Codex => "fake-codex",
        }
    }

    /// The engine's command on PATH when its `binary_env` is not set (what its wrapper runs).
    pub fn default_binary(self) -> &'static str {
        match self {
            Adapter::Claude => "claude",
            Adapter::Cursor => "cursor-agent",
            Adapter::Codex => "codex",
        }
    }

    /// The environment variable that names the engine's binary for its wrapper.
    pub fn binary_env(self) -> &'static str {
        match self {
            Adapter::Claude => "HARNESS_CLAUDE_BIN",
            Adapter::Cursor => "HARNESS_CURSOR_BIN",
            Adapter::Codex => "HARNESS_CODEX_BIN",
        }
    }
}

/// Where a wrapper reads a task's permission settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermissionEnv {
    /// The tools the turn may use unasked (comma-separated rules).
    pub allowed_tools: &'static str,
    /// The engine's permission mode (`default` for a task that asks).
    pub mode: &'static str,
    /// The MCP config naming the permission tool a batch turn asks through.
    pub mcp_config: &'static str,
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Adapter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        crate::wire::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = Adapter::ALL.iter().map(|a| a.as_str()).collect();
            let (last, rest) = names.split_last().expect("engines");
            format!("unknown adapter {s:?}: expected {} or {last}", rest.join(", "))
        })
    }
}
