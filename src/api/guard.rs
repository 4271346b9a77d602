//! Who may talk to the API: the `Host` allowlist (DNS-rebinding defence). A page on `evil.example`
//! that rebinds its name to 127.0.0.1 still sends `Host: evil.example`, so only the loopback names
//! with this listener's own port pass.

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
    use super::*;
    use hyper::header::HeaderValue;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(HOST, HeaderValue::from_str(v).unwrap());
        m
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
