//! Run identity: `Slug`, `RunId`, `TaskId` — parsing, validation and runId derivation.
//!
//! Every id that reaches a filesystem path or a URL route goes through one of these types first, and
//! their grammars admit no `/`, no `..` prefix, no NUL and nothing longer than a path component can
//! be, so path traversal is impossible by construction. This module never touches the filesystem.

use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;

/// Why an id was refused. Carries the offending value (truncated) so the message can be acted on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("invalid slug {0:?}: expected [a-z0-9][a-z0-9._-]{{0,47}}")]
    Slug(String),
    #[error("invalid runId {0:?}: expected <12 hex digits>--<slug>")]
    RunId(String),
    #[error("invalid task id {0:?}: expected [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")]
    TaskId(String),
    #[error("invalid host name {0:?}: expected a DNS label, [a-z0-9] or [a-z0-9][a-z0-9-]{{0,61}}[a-z0-9]")]
    Host(String),
}

/// Shortens an untrusted value for an error message (a 1 MB id must not become a 1 MB log line).
fn shown(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// True when `s` is `first` followed by up to `max_rest` bytes of `rest`.
fn matches_grammar(s: &str, first: fn(u8) -> bool, rest: fn(u8) -> bool, max_rest: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b.len() <= max_rest + 1 && first(b[0]) && b[1..].iter().all(|&c| rest(c))
}

fn slug_first(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}
fn slug_rest(c: u8) -> bool {
    slug_first(c) || matches!(c, b'.' | b'_' | b'-')
}
fn task_first(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}
fn task_rest(c: u8) -> bool {
    task_first(c) || matches!(c, b'.' | b'_' | b'-')
}

/// The longest slug: a first character and up to 47 more.
pub const SLUG_MAX: usize = 48;

/// The human label of a run, topic-derived and unique only within one repo+worktree.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slug(String);

impl Slug {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        if matches_grammar(s, slug_first, slug_rest, SLUG_MAX - 1) {
            Ok(Slug(s.to_string()))
        } else {
            Err(IdError::Slug(shown(s)))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The globally unique key of a run: `hex(sha256(repoRoot + "\0" + worktree))[:12] + "--" + slug`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(String);

impl RunId {
    /// Derives the runId from canonical absolute paths. `worktree` is `repo_root` when the run has no
    /// separate worktree. Callers canonicalize (see `home::canonical_dir`); this function only hashes.
    pub fn derive(repo_root: &Path, worktree: &Path, slug: &Slug) -> RunId {
        let mut h = Sha256::new();
        h.update(repo_root.as_os_str().as_encoded_bytes());
        h.update([0u8]);
        h.update(worktree.as_os_str().as_encoded_bytes());
        let digest = h.finalize();
        let mut hex = String::with_capacity(12);
        for b in &digest[..6] {
            hex.push_str(&format!("{b:02x}"));
        }
        RunId(format!("{hex}--{}", slug.as_str()))
    }

    pub fn parse(s: &str) -> Result<Self, IdError> {
        let err = || IdError::RunId(shown(s));
        let (hash, slug) = s.split_once("--").ok_or_else(err)?;
        if hash.len() != 12 || !hash.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
            return Err(err());
        }
        Slug::parse(slug).map_err(|_| err())?;
        Ok(RunId(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The slug part after `--`.
    pub fn slug(&self) -> Slug {
        // The constructor checked the shape, so the split and the slug grammar both hold.
        Slug(self.0[14..].to_string())
    }
}

/// A task's id inside one plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

impl TaskId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        if matches_grammar(s, task_first, task_rest, 63) {
            Ok(TaskId(s.to_string()))
        } else {
            Err(IdError::TaskId(shown(s)))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A host of a fleet (`harness relay --host`): a DNS label, lowercase — one token of the fleet's
/// NATS subjects (`spec/FLEET.md`), so it holds no `.`, `*`, `>` or space.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(String);

impl HostName {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let b = s.as_bytes();
        let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
        let ok = !b.is_empty() && b.len() <= 63 && b.iter().all(inner) && b[0] != b'-' && b[b.len() - 1] != b'-';
        if ok { Ok(HostName(s.to_string())) } else { Err(IdError::Host(shown(s))) }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! display_and_serde {
    ($t:ident) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $t::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}
display_and_serde!(Slug);
display_and_serde!(RunId);
display_and_serde!(TaskId);
display_and_serde!(HostName);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_grammar() {
        assert!(Slug::parse("api-refactor").is_ok());
        assert!(Slug::parse("a").is_ok());
        assert!(Slug::parse(&"a".repeat(48)).is_ok());
        for bad in ["", "A", "-x", ".x", "a/b", "..", "a\0b", "é", &"a".repeat(49)] {
            assert!(Slug::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn task_grammar() {
        assert!(TaskId::parse("T1.fix_api-2").is_ok());
        assert!(TaskId::parse(&"a".repeat(64)).is_ok());
        for bad in ["", "..", ".a", "a/b", "a b", "a%2F", &"a".repeat(65)] {
            assert!(TaskId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn host_grammar() {
        for good in ["a", "build-1", "ci", &"a".repeat(63)] {
            assert!(HostName::parse(good).is_ok(), "{good:?} refused");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a*", "a>", "a b", "é", &"a".repeat(64)] {
            assert!(HostName::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn run_id_derivation_is_stable_and_path_sensitive() {
        let s = Slug::parse("api-refactor").unwrap();
        let a = RunId::derive(Path::new("/r/one"), Path::new("/r/one"), &s);
        let b = RunId::derive(Path::new("/r/two"), Path::new("/r/two"), &s);
        assert_ne!(a, b);
        assert_eq!(a, RunId::derive(Path::new("/r/one"), Path::new("/r/one"), &s));
        assert!(a.as_str().ends_with("--api-refactor"));
        assert_eq!(RunId::parse(a.as_str()).unwrap(), a);
        assert_eq!(a.slug(), s);
        // The NUL separator keeps ("/a", "b/c") and ("/a\0b", "c")-style splits apart.
        let c = RunId::derive(Path::new("/r/on"), Path::new("e/r/one"), &s);
        assert_ne!(a, c);
    }

    #[test]
    fn run_id_parse_rejects() {
        for bad in ["", "abc--x", "0123456789ab-x", "0123456789AB--x", "0123456789ab--", "0123456789ab--../x"] {
            assert!(RunId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn known_digest() {
        // sha256("/repo\0/repo") computed independently with sha256sum.
        let s = Slug::parse("demo").unwrap();
        let id = RunId::derive(Path::new("/repo"), Path::new("/repo"), &s);
        assert_eq!(id.as_str(), "50fa6a852352--demo");
    }
}
