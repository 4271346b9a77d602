//! Who may talk to the API:
//! - the `Host` allowlist (DNS-rebinding defence): a page on `evil.example` that rebinds its name to
//!   127.0.0.1 still sends `Host: evil.example`, so only the loopback names with this listener's own
//!   port pass;
//! - the `Origin` allowlist: a browser request from any origin that is neither the API's own nor
//!   configured (`--allow-origin`) is refused (CSRF, cross-site reads); allowed origins get exact
//!   CORS answers, never `*`;
//! - who the peer is: a process of the API's own uid passes with nothing to present; anyone else
//!   (another uid, or a peer whose uid cannot be found: a non-loopback listener, a lookup failure)
//!   needs the bearer token (`Authorization: Bearer <t>` or `?token=<t>`, compared in constant time;
//!   the header wins when both are given). A token presented must be right, whoever presents it.

use hyper::HeaderMap;
use hyper::header::HOST;

/// Which kind of listener a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A loopback TCP listener on this port.
    Tcp(u16),
    /// A Unix socket: only local processes with file access reach it; `Host: localhost` is what
    /// curl sends there.
    Unix,
}

/// One accepted connection: its listener and the peer's uid, found once when it was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    pub via: Via,
    pub uid: Option<u32>,
    pub origin: Origin,
    /// The request presented the valid token (set once access is granted).
    pub tokened: bool,
}

/// Which process is on the other end, as far as the kernel tells: what the operator-only verbs
/// hand the supervisor so it can refuse a run's own tasks (`spec/CONTROL.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A Unix socket's peer (`SO_PEERCRED`).
    Pid(u32),
    /// A loopback TCP peer's socket inode (`sock_diag`): the process holding it is looked up
    /// when a verb needs it.
    Socket(u32),
    /// A peer on another machine (a non-loopback listener, `--allow-remote`): no local process.
    Remote,
    /// A local peer the kernel could not place (a socket already closed, another OS).
    Unknown,
    /// A request a fleet relay carries for a client of a fleet API (`spec/FLEET.md`): no local
    /// process sent it; the fleet API's guard and the NATS credentials judged its sender.
    Relayed,
}

impl Conn {
    /// The pid of the process that sent the request: `Ok(None)` for a remote peer; an error when a
    /// local peer cannot be placed (the operator-only verbs then fail closed). Scans `/proc` for a
    /// TCP peer: call it off the async workers.
    pub fn sender_pid(&self) -> Result<Option<u32>, String> {
        // Another uid (let in by its token) cannot be one of this uid's tasks.
        if self.uid.is_some_and(|u| u != crate::os::peer::own_uid()) {
            return Ok(None);
        }
        // A peer in a pid namespace this process cannot see is let through by the token. A socket
        // no process holds any more is not: its sender connected, sent and closed before it could
        // be placed — what an agent that read the token would do to pass as the operator.
        match self.placed() {
            Err(_) if self.tokened && self.origin == Origin::Pid(0) => Ok(None),
            Err(why) => Err(format!(
                "{why}: send them from this machine's CLI or over the API's Unix socket, and keep the connection open for the answer"
            )),
            ok => ok,
        }
    }

    fn placed(&self) -> Result<Option<u32>, String> {
        match self.origin {
            // 0: a peer in a pid namespace this process cannot see.
            Origin::Pid(0) => Err("cannot tell which process sent this request (its pid is not visible here)".into()),
            Origin::Pid(p) => Ok(Some(p)),
            Origin::Remote | Origin::Relayed => Ok(None),
            Origin::Socket(inode) => crate::os::peer::socket_holder(inode).map(Some).ok_or_else(|| {
                format!("cannot tell which process sent this request (no process holds its socket, inode {inode})")
            }),
            // Off Linux no lookup places a TCP peer: the rule is Linux's (SECURITY.md).
            Origin::Unknown if !cfg!(target_os = "linux") => Ok(None),
            Origin::Unknown => Err("cannot tell which process sent this request".to_string()),
        }
    }
}

/// Why a request may not go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// A token was presented and it is wrong (401).
    BadToken(String),
    /// Another uid (or an unknown one) without a token (403).
    Foreign(String),
}

/// The token a request presents: the `Authorization: Bearer` header, else `?token=`.
/// Whether the request presents a token at all (`check_access` judged it first).
pub fn token_presented(headers: &HeaderMap, query: Option<&str>) -> bool {
    matches!(presented(headers, query), Ok(Some(_)))
}

fn presented(headers: &HeaderMap, query: Option<&str>) -> Result<Option<String>, Denied> {
    if let Some(v) = headers.get(hyper::header::AUTHORIZATION) {
        // An Authorization header in any other scheme is a mistake to be told, not ignored.
        return match v.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) {
            Some(t) => Ok(Some(t.trim().to_string())),
            None => Err(Denied::BadToken("Authorization must be \"Bearer <token>\"".into())),
        };
    }
    Ok(query.and_then(|q| {
        q.split('&').find_map(|kv| kv.strip_prefix("token=")).and_then(|v| crate::api::routes::percent_decode(v).ok())
    }))
}

/// Decides who may go on: the owner's uid with no token; anyone with the right token; a wrong token
/// is refused whoever presents it.
pub fn check_access(
    headers: &HeaderMap,
    query: Option<&str>,
    token: Option<&str>,
    peer_uid: Option<u32>,
    owner: u32,
) -> Result<(), Denied> {
    match (presented(headers, query)?, token) {
        (Some(g), Some(want)) if constant_time_eq(g.as_bytes(), want.as_bytes()) => Ok(()),
        (Some(_), _) => Err(Denied::BadToken("invalid token".into())),
        (None, _) if peer_uid == Some(owner) => Ok(()),
        (None, _) => Err(Denied::Foreign(format!(
            "connection from uid {}: only uid {owner} (this API's owner) or a bearer token may use this API",
            peer_uid.map_or_else(|| "unknown".to_string(), |u| u.to_string())
        ))),
    }
}

/// Checks the `Host` header. Exactly one must be present.
pub fn check_host(headers: &HeaderMap, via: Via) -> Result<(), String> {
    let mut hosts = headers.get_all(HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(h), None) => h.to_str().map_err(|_| "Host header is not ASCII".to_string())?,
        (None, _) => return Err("missing Host header".into()),
        (Some(_), Some(_)) => return Err("more than one Host header".into()),
    };
    let ok = match via {
        Via::Tcp(port) => allowed_tcp_host(host, port),
        Via::Unix => host == "localhost" || host == "127.0.0.1" || allowed_any_port(host),
    };
    if ok { Ok(()) } else { Err(format!("Host {host:?} is not a loopback name of this API")) }
}

/// An origin as browsers send it: lowercase scheme and host, no trailing slash.
pub fn normalize_origin(o: &str) -> Option<String> {
    let o = o.trim().trim_end_matches('/');
    let (scheme, rest) = o.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if (scheme != "http" && scheme != "https") || rest.is_empty() || rest.contains('/') {
        return None;
    }
    Some(format!("{scheme}://{}", rest.to_ascii_lowercase()))
}

/// What the `Origin` check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginOk {
    /// No `Origin` (not a browser) or the API's own origin: no CORS headers.
    SameOrNone,
    /// An allowlisted origin: echo it in `Access-Control-Allow-Origin`.
    Cors(String),
}

/// Checks the `Origin` header against the API's own origins and the allowlist.
pub fn check_origin(headers: &HeaderMap, via: Via, allowed: &[String]) -> Result<OriginOk, String> {
    let mut it = headers.get_all(hyper::header::ORIGIN).iter();
    let origin = match (it.next(), it.next()) {
        (None, _) => return Ok(OriginOk::SameOrNone),
        (Some(_), Some(_)) => return Err("more than one Origin header".into()),
        (Some(o), None) => o.to_str().map_err(|_| "Origin header is not ASCII".to_string())?,
    };
    let Some(norm) = normalize_origin(origin) else {
        return Err(format!("Origin {:?} is not allowed", short(origin)));
    };
    if let Via::Tcp(port) = via {
        let own =
            [format!("http://127.0.0.1:{port}"), format!("http://localhost:{port}"), format!("http://[::1]:{port}")];
        if own.contains(&norm) {
            return Ok(OriginOk::SameOrNone);
        }
    }
    if allowed.contains(&norm) {
        return Ok(OriginOk::Cors(norm));
    }
    Err(format!("Origin {:?} is not allowed (start the API with --allow-origin {norm} to allow it)", short(origin)))
}

fn short(s: &str) -> String {
    s.chars().take(100).collect()
}

/// Compares without an early exit (the length is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn allowed_tcp_host(host: &str, port: u16) -> bool {
    let p = port.to_string();
    let with_port = |name: &str| host.strip_prefix(name).and_then(|r| r.strip_prefix(':')) == Some(p.as_str());
    let bare_ok = port == 80 && matches!(host, "127.0.0.1" | "localhost" | "[::1]");
    bare_ok || with_port("127.0.0.1") || with_port("localhost") || with_port("[::1]")
}

fn allowed_any_port(host: &str) -> bool {
    ["127.0.0.1:", "localhost:", "[::1]:"]
        .iter()
        .any(|n| host.strip_prefix(n).is_some_and(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit())))
}

#[cfg(test)]
mod tests {

    /// A socket no process holds (its sender sent and closed) is refused, token or not: a same-uid
    /// agent can read the token. Only a peer in a pid namespace the API cannot see passes with it.
    #[test]
    fn a_sender_the_api_cannot_place_is_refused_token_or_not() {
        let c = |tokened| Conn { via: Via::Tcp(1), uid: None, origin: Origin::Socket(u32::MAX), tokened };
        for tokened in [false, true] {
            let refused = c(tokened).sender_pid().unwrap_err();
            assert!(
                refused.contains("cannot tell which process") && refused.contains("this machine's CLI"),
                "{refused}"
            );
        }
        let hidden = |tokened| Conn { origin: Origin::Pid(0), ..c(tokened) };
        assert!(hidden(false).sender_pid().is_err());
        assert_eq!(hidden(true).sender_pid(), Ok(None), "a pid namespace apart, with the token");
        let other = Conn { uid: Some(crate::os::peer::own_uid() + 1), ..c(false) };
        assert_eq!(other.sender_pid(), Ok(None), "another uid is no task of ours");
    }

    use super::*;
    use hyper::header::HeaderValue;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(HOST, HeaderValue::from_str(v).unwrap());
        m
    }

    #[test]
    fn origin_allowlist_and_token() {
        let mut h = HeaderMap::new();
        assert_eq!(check_origin(&h, Via::Tcp(7878), &[]), Ok(OriginOk::SameOrNone));
        h.insert(hyper::header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:7878"));
        assert_eq!(check_origin(&h, Via::Tcp(7878), &[]), Ok(OriginOk::SameOrNone));
        h.insert(hyper::header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:5173"));
        assert!(check_origin(&h, Via::Tcp(7878), &[]).is_err());
        let allow = vec!["http://127.0.0.1:5173".to_string()];
        assert_eq!(check_origin(&h, Via::Tcp(7878), &allow), Ok(OriginOk::Cors("http://127.0.0.1:5173".into())));
        h.insert(hyper::header::ORIGIN, HeaderValue::from_static("null"));
        assert!(check_origin(&h, Via::Tcp(7878), &allow).is_err());
        // Who gets in: the owner with nothing; another or an unknown uid only with the token; a
        // wrong token never; the header wins over the query.
        let (owner, stranger) = (1000, Some(65534));
        let mut h = HeaderMap::new();
        assert!(check_access(&h, None, None, Some(owner), owner).is_ok());
        assert!(check_access(&h, None, Some("s3"), Some(owner), owner).is_ok());
        assert!(matches!(check_access(&h, None, Some("s3"), stranger, owner), Err(Denied::Foreign(_))));
        assert!(matches!(check_access(&h, None, Some("s3"), None, owner), Err(Denied::Foreign(_))));
        assert!(matches!(check_access(&h, None, None, stranger, owner), Err(Denied::Foreign(_))));
        assert!(check_access(&h, Some("a=1&token=s3"), Some("s3"), stranger, owner).is_ok());
        h.insert(hyper::header::AUTHORIZATION, HeaderValue::from_static("Bearer s3"));
        assert!(check_access(&h, None, Some("s3"), stranger, owner).is_ok());
        assert!(check_access(&h, Some("token=nope"), Some("s3"), stranger, owner).is_ok());
        assert!(matches!(check_access(&h, None, Some("s4"), Some(owner), owner), Err(Denied::BadToken(_))));
    }

    #[test]
    fn host_allowlist() {
        assert!(check_host(&h("127.0.0.1:7878"), Via::Tcp(7878)).is_ok());
        assert!(check_host(&h("localhost:7878"), Via::Tcp(7878)).is_ok());
        assert!(check_host(&h("[::1]:7878"), Via::Tcp(7878)).is_ok());
        assert!(check_host(&h("127.0.0.1:7879"), Via::Tcp(7878)).is_err());
        assert!(check_host(&h("evil.example:7878"), Via::Tcp(7878)).is_err());
        assert!(check_host(&h("localhost.evil:7878"), Via::Tcp(7878)).is_err());
        assert!(check_host(&h("127.0.0.1"), Via::Tcp(7878)).is_err());
        assert!(check_host(&HeaderMap::new(), Via::Tcp(7878)).is_err());
        assert!(check_host(&h("localhost"), Via::Unix).is_ok());
        assert!(check_host(&h("evil.example"), Via::Unix).is_err());
    }
}
