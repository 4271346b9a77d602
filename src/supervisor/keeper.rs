//! Keeps the run's summary (`crate::state::summary`, what `GET /runs` answers from) current while the
//! supervisor lives: rewritten whenever the journal or the liveness sidecar changed since the last
//! write (looked at every `POLL`), and once more as the supervisor ends. A reader never depends on it:
//! a stale summary is rebuilt from the journal by whoever reads it.

use crate::os::home::Home;
use crate::state::registry::Pointer;
use crate::state::spend::LogTallies;
use crate::state::summary::{Fp, Fps};
use std::time::Duration;
use tokio::sync::watch;

/// How often the run's files are looked at.
const POLL: Duration = Duration::from_millis(200);

pub(super) struct Keeper {
    pub stop: watch::Sender<bool>,
    pub task: tokio::task::JoinHandle<()>,
}

pub(super) fn spawn(home: Home, pointer: Pointer) -> Keeper {
    let (stop, stopped) = watch::channel(false);
    Keeper { stop, task: tokio::spawn(serve(home, pointer, stopped)) }
}

async fn serve(home: Home, pointer: Pointer, mut stopped: watch::Receiver<bool>) {
    let ppath = home.runs_dir().join(format!("{}.json", pointer.run_id));
    let mut written: Option<Fps> = None;
    let mut tallies = LogTallies::default();
    loop {
        let now = Fps::now(Fp::of(&ppath), &pointer);
        let last = *stopped.borrow();
        if written != Some(now) || last {
            let (h, p) = (home.clone(), pointer.clone());
            match tokio::task::spawn_blocking(move || {
                crate::state::summary::refresh(&h, &p, &mut tallies);
                tallies
            })
            .await
            {
                Ok(t) => tallies = t,
                Err(_) => return,
            }
            written = Some(now);
        }
        if last {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stopped.changed() => {}
        }
    }
}
