//! harness's edge with the operating system and git: file locks, the `$HARNESS_HOME` layout, peer
//! credentials, service plumbing (signals, socket activation, sd_notify), unit installation,
//! launchd, every git call and the task worktrees built on them, and following a logfile. Knows no
//! run state.

pub mod change;
pub mod flock;
pub mod git;
pub mod home;
pub mod install;
pub mod launchd;
pub mod localtime;
pub mod peer;
pub mod service;
pub mod stamp;
pub mod tail;
pub mod worktree;
