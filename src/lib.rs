//! harness: the control and observability surface for runs of AI coding agents.
//!
//! See `ARCHITECTURE.md` for the code map and the invariants each module keeps.

pub mod api;
pub mod approval_mcp;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod demo;
pub mod engine;
pub mod events;
pub mod exit;
pub mod fleet;
pub mod ids;
pub mod os;
pub mod preflight;
pub mod progress;
pub mod relay;
pub mod render;
pub mod rules;
pub mod runner;
pub mod state;
pub mod supervisor;
pub mod term;
pub mod timeouts;
pub mod views;
pub mod wire;
pub mod wrapper;
