//! `Flock`: an exclusive `flock(2)` on a file, held until the guard is dropped. The one way the crate
//! takes a file lock (the journal's appends, the liveness sidecar, the DynWF inbox, the supervisor's
//! run lock). Waiting is EINTR-safe. It never reads or writes the locked file.

use std::fs::File;
use std::io;

/// Holds `flock(LOCK_EX)` on an open file description until dropped. The guard locks a duplicate of
/// the caller's descriptor (one `dup(2)`), which shares the caller's open file description, so the
/// caller keeps using its own `File` while the lock is held.
pub struct Flock {
    _held: nix::fcntl::Flock<File>,
}

impl Flock {
    /// Waits for the lock (retrying when a signal interrupts the wait).
    pub fn exclusive(file: &File) -> io::Result<Flock> {
        let mut f = file.try_clone()?;
        loop {
            match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive) {
                Ok(l) => return Ok(Flock { _held: l }),
                Err((back, nix::errno::Errno::EINTR)) => f = back,
                Err((_, e)) => return Err(e.into()),
            }
        }
    }

    /// Takes the lock if nobody holds it; `None` when another open file description does.
    pub fn try_exclusive(file: &File) -> io::Result<Option<Flock>> {
        let mut f = file.try_clone()?;
        loop {
            match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(l) => return Ok(Some(Flock { _held: l })),
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                Err((back, nix::errno::Errno::EINTR)) => f = back,
                Err((_, e)) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_description_waits_and_the_same_one_does_not_block_itself() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("l");
        let a = File::create(&p).unwrap();
        let b = File::open(&p).unwrap();
        let held = Flock::exclusive(&a).unwrap();
        assert!(Flock::try_exclusive(&b).unwrap().is_none(), "another description must be refused");
        drop(held);
        assert!(Flock::try_exclusive(&b).unwrap().is_some(), "free once the guard is dropped");
    }
}
