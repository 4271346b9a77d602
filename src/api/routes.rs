//! Request path → `Route`. Every path segment is percent-decoded once, then parsed as the id type its
//! position demands; anything that is not a valid id (an encoded `/`, `..`, NUL, invalid UTF-8, an
//! over-long value) is a 400 naming the segment, before any handler or filesystem sees it.

use crate::ids::{HostName, IdError, RunId, TaskId};

/// A matched route with its ids already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /watch`: every run's journal records.
    Watch,
    Runs,
    Run(RunId),
    Task(RunId, TaskId),
    Stream(RunId, TaskId),
    /// The task's events recorded and live, for any run, ending with `event: end`.
    Feed(RunId, TaskId),
    Events(RunId, TaskId),
    /// What the task changed (its commit, attempt or worktree), as a diff or `?stat=1`.
    TaskDiff(RunId, TaskId),
    /// The run's own commits, as a diff or `?stat=1`.
    RunDiff(RunId),
    /// One run's journal records, paged.
    Journal(RunId),
    /// How the task's gate went.
    Gate(RunId, TaskId),
    /// How the task's review seat went.
    Review(RunId, TaskId),
    Steer(RunId, TaskId),
    Kill(RunId, TaskId),
    Interrupt(RunId, TaskId),
    /// Re-dispatch a halted task.
    Retry(RunId, TaskId),
    /// End a halted task `skipped`.
    Skip(RunId, TaskId),
    /// The run's asked tool calls.
    Approvals(RunId),
    /// The operator's decision on one.
    Decide(RunId, TaskId, String),
    Pause(RunId),
    /// The budget verb.
    Budget(RunId),
    Resume(RunId),
    /// `GET /hosts`: a fleet API's hosts, with when each relay last spoke (added with the fleet).
    Hosts,
}

impl Route {
    /// The run the route addresses (`None`: `/watch`, `/runs`, `/hosts`).
    pub fn run(&self) -> Option<&RunId> {
        match self {
            Route::Watch | Route::Runs | Route::Hosts => None,
            Route::Run(r)
            | Route::RunDiff(r)
            | Route::Journal(r)
            | Route::Approvals(r)
            | Route::Pause(r)
            | Route::Budget(r)
            | Route::Resume(r)
            | Route::Task(r, _)
            | Route::Stream(r, _)
            | Route::Feed(r, _)
            | Route::Events(r, _)
            | Route::TaskDiff(r, _)
            | Route::Gate(r, _)
            | Route::Review(r, _)
            | Route::Steer(r, _)
            | Route::Kill(r, _)
            | Route::Interrupt(r, _)
            | Route::Retry(r, _)
            | Route::Skip(r, _)
            | Route::Decide(r, _, _) => Some(r),
        }
    }

    /// The HTTP methods the route answers (for 405 and `Allow`).
    pub fn methods(&self) -> &'static [&'static str] {
        match self {
            Route::Watch
            | Route::Runs
            | Route::Run(_)
            | Route::Task(..)
            | Route::Stream(..)
            | Route::Feed(..)
            | Route::Events(..)
            | Route::TaskDiff(..)
            | Route::RunDiff(_)
            | Route::Journal(_)
            | Route::Gate(..)
            | Route::Review(..)
            | Route::Approvals(_)
            | Route::Hosts => &["GET"],
            Route::Decide(..) => &["POST"],
            Route::Steer(..)
            | Route::Kill(..)
            | Route::Interrupt(..)
            | Route::Retry(..)
            | Route::Skip(..)
            | Route::Pause(_)
            | Route::Resume(_)
            | Route::Budget(_) => &["POST"],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("no route for {0}")]
    NotFound(String),
    #[error("bad path segment: {0}")]
    BadSegment(String),
    #[error(transparent)]
    BadId(#[from] IdError),
}

/// Decodes `%XX` escapes. Refuses malformed escapes, invalid UTF-8 and NUL.
pub fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let v = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
            match v {
                Some(v) => out.push(v),
                None => return Err("malformed percent-escape".into()),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return Err("NUL byte".into());
    }
    String::from_utf8(out).map_err(|_| "not UTF-8".into())
}

/// Splits a fleet's host prefix off a path: `/hosts/<host>/runs/…` is `(Some(host), "/runs/…")`
/// (added with the fleet: one host's run, whichever hosts share its runId); any other path is
/// itself, with no host.
pub fn split_host(path: &str) -> Result<(Option<HostName>, &str), RouteError> {
    let Some(rest) = path.strip_prefix("/hosts/") else { return Ok((None, path)) };
    let (h, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let h = percent_decode(h).map_err(|e| RouteError::BadSegment(format!("{}: {e}", shorten(h))))?;
    let host = HostName::parse(&h)?;
    // One host's runs and its /watch: not the host list, nor a host inside a host.
    let first = tail.split(['/', '?']).next().unwrap_or("");
    if !matches!(first, "runs" | "watch") {
        return Err(RouteError::NotFound(shorten(path)));
    }
    Ok((Some(host), &path[path.len() - tail.len() - 1..]))
}

/// Matches a path (no query string).
pub fn route(path: &str) -> Result<Route, RouteError> {
    let not_found = || RouteError::NotFound(shorten(path));
    let rest = path.strip_prefix('/').ok_or_else(not_found)?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let segs: Vec<&str> = rest.split('/').collect();
    if segs == ["watch"] {
        return Ok(Route::Watch);
    }
    if segs == ["hosts"] {
        return Ok(Route::Hosts);
    }
    if segs.first() != Some(&"runs") {
        return Err(not_found());
    }
    let decode = |s: &str| percent_decode(s).map_err(|e| RouteError::BadSegment(format!("{}: {e}", shorten(s))));
    let run = |s: &str| -> Result<RunId, RouteError> { Ok(RunId::parse(&decode(s)?)?) };
    let task = |s: &str| -> Result<TaskId, RouteError> { Ok(TaskId::parse(&decode(s)?)?) };
    Ok(match segs.as_slice() {
        ["runs"] => Route::Runs,
        ["runs", r] => Route::Run(run(r)?),
        ["runs", r, "pause"] => Route::Pause(run(r)?),
        ["runs", r, "diff"] => Route::RunDiff(run(r)?),
        ["runs", r, "journal"] => Route::Journal(run(r)?),
        ["runs", r, "budget"] => Route::Budget(run(r)?),
        ["runs", r, "resume"] => Route::Resume(run(r)?),
        ["runs", r, "tasks", t] => Route::Task(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "stream"] => Route::Stream(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "events"] => Route::Events(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "feed"] => Route::Feed(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "diff"] => Route::TaskDiff(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "gate"] => Route::Gate(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "review"] => Route::Review(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "steer"] => Route::Steer(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "kill"] => Route::Kill(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "interrupt"] => Route::Interrupt(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "retry"] => Route::Retry(run(r)?, task(t)?),
        ["runs", r, "tasks", t, "skip"] => Route::Skip(run(r)?, task(t)?),
        ["runs", r, "approvals"] => Route::Approvals(run(r)?),
        ["runs", r, "tasks", t, "approvals", a] => Route::Decide(run(r)?, task(t)?, approval_id(&decode(a)?)?),
        // A segment that is not a valid id where an id belongs is a 400 even on a longer path, so a
        // traversal attempt never reads as "merely not found".
        ["runs", r, ..] => {
            run(r)?;
            if let ["runs", _, "tasks", t, ..] = segs.as_slice() {
                task(t)?;
            }
            return Err(not_found());
        }
        _ => return Err(not_found()),
    })
}

/// An approval id: what claude or we minted (a uuid), `[A-Za-z0-9._:-]{1,128}`.
fn approval_id(s: &str) -> Result<String, RouteError> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(s.to_string())
    } else {
        Err(RouteError::BadSegment(format!("approval id {}: expected [A-Za-z0-9._:-]{{1,128}}", shorten(s))))
    }
}

fn shorten(s: &str) -> String {
    if s.len() <= 120 {
        return s.to_string();
    }
    let mut end = 120;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "0123456789ab--demo";

    #[test]
    fn matches_routes() {
        assert_eq!(route("/runs").unwrap(), Route::Runs);
        assert_eq!(route("/runs/").unwrap(), Route::Runs);
        assert!(matches!(route(&format!("/runs/{RUN}")).unwrap(), Route::Run(_)));
        assert!(matches!(route(&format!("/runs/{RUN}/tasks/T1/stream")).unwrap(), Route::Stream(..)));
        assert!(matches!(route(&format!("/runs/{RUN}/tasks/T%31")).unwrap(), Route::Task(_, t) if t.as_str() == "T1"));
    }

    #[test]
    fn traversal_is_bad_request() {
        for p in [
            "/runs/..%2F..%2Fetc",
            "/runs/%2Fetc%2Fpasswd",
            &format!("/runs/{RUN}/tasks/..%2Fx"),
            &format!("/runs/{RUN}/tasks/a%00b"),
            &format!("/runs/{RUN}/tasks/%ff"),
            &format!("/runs/{RUN}/tasks/%zz"),
            "/runs/..",
        ] {
            let e = route(p).unwrap_err();
            assert!(!matches!(e, RouteError::NotFound(_)), "{p}: {e}");
        }
    }

    #[test]
    fn a_host_prefix_is_split_off_and_checked() {
        let path = format!("/hosts/build-1/runs/{RUN}/tasks/T1");
        let (h, rest) = split_host(&path).unwrap();
        assert_eq!(h.unwrap().as_str(), "build-1");
        assert_eq!(rest, format!("/runs/{RUN}/tasks/T1"));
        assert_eq!(split_host("/runs").unwrap(), (None, "/runs"));
        assert!(matches!(split_host("/hosts/Bad.Host/runs"), Err(RouteError::BadId(_))));
        assert!(matches!(split_host("/hosts/a"), Err(RouteError::NotFound(_))));
        assert!(matches!(split_host("/hosts/a/hosts"), Err(RouteError::NotFound(_))));
        assert!(matches!(split_host("/hosts/a/hosts/b/runs"), Err(RouteError::NotFound(_))));
        assert_eq!(split_host("/hosts/a/watch?rows=1").unwrap().1, "/watch?rows=1");
        assert_eq!(route("/hosts").unwrap(), Route::Hosts);
    }

    #[test]
    fn unknown_is_not_found() {
        assert!(matches!(route("/"), Err(RouteError::NotFound(_))));
        assert!(matches!(route("/etc/passwd"), Err(RouteError::NotFound(_))));
        assert!(matches!(route(&format!("/runs/{RUN}/nope")), Err(RouteError::NotFound(_))));
    }
}
