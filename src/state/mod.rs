//! What harness keeps on disk about runs, and nothing else: the journal (the truth), the registry
//! of run pointers, the liveness cache, plans, summaries, the DynWF inbox, usage folds over logs,
//! notifications, the audit of refusals, and retention; and those values as the views (`crate::views`)
//! show them. Builds on `os/`; knows nothing of HTTP, the scheduler or the CLI.

pub mod audit;
pub mod inbox;
pub mod journal;
pub mod liveness;
pub mod notify;
pub mod plan;
pub mod prune;
pub mod registry;
pub mod spend;
pub mod summary;
pub mod views;
