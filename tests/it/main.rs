//! The integration tests, one binary (as pueue and rust-analyzer do): each module is a former
//! `tests/<name>.rs`, all sharing `common` (compiled once). Run one group with
//! `cargo test --test it <module>::`.

mod common;

mod approvals;
mod browser;
mod budget;
mod chaos;
mod cli;
mod cursors;
mod engine_values;
mod faults;
mod fleet;
mod foundation;
mod hostile;
mod integrity;
mod lifecycle;
mod live_api;
mod live_channel;
mod normalize;
mod notify;
mod openapi;
mod operator;
mod overview;
mod private;
mod protocol;
mod ratelimit;
mod real_engines;
mod record;
mod scheduler;
mod schemathesis;
mod service;
mod stall;
mod supervisor;
mod systemd;
mod tidy;
mod top;
mod trust;
mod verb_status;
mod views;
mod watch;
mod webui;
mod worktrees;
mod wrappers;
