//! harness: the control and observability surface for runs of AI coding agents.
//!
//! See `ARCHITECTURE.md` for the code map and the invariants each module keeps.

pub mod api;
pub mod approval_mcp;
pub mod audit;
pub mod cli;
pub mod client;
pub mod config;
pub mod demo;
pub mod engine;
pub mod events;
pub mod exit;
pub mod flock;
pub mod git;
pub mod home;
pub mod ids;
pub mod inbox;
pub mod install;
pub mod journal;
pub mod launchd;
pub mod liveness;
pub mod notify;
pub mod peer;
pub mod plan;
pub mod prune;
pub mod registry;
pub mod render;
pub mod rules;
pub mod runner;
pub mod service;
pub mod spend;
pub mod summary;
pub mod supervisor;
pub mod tail;
pub mod term;
pub mod timeouts;
pub mod worktree;
pub mod wrapper;
