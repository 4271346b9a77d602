//! Hostile inputs against a running API, each with the status it must get: traversal in every id
//! position, encoded slashes, NUL, huge ids, invalid UTF-8, duplicate and contradictory headers,
//! absurd seqs, slowloris. Never a 5xx, never a hang, never a crash.

use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// (method, path, extra headers, body, expected status)
type Case<'a> = (&'a str, String, Vec<(&'a str, String)>, Option<&'a [u8]>, u16);

#[test]
fn hostile_inputs_get_their_expected_status() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let run = run_id_of(&ids, "finished");
    let host = format!("127.0.0.1:{}", api.port);
    let mb = "a".repeat(1 << 20);
    let digits = "9".repeat(10_000);
    // Made by the API on its first start.
    let token = std::fs::read_to_string(home.path().join("api.token")).unwrap().trim().to_string();
    let bearer = |t: &str| format!("Bearer {t}");
    let table: Vec<Case> = vec![
        ("GET", "/runs/..%2F..%2Fetc%2Fpasswd".into(), vec![], None, 400),
        ("GET", "/runs/%2e%2e%2f%2e%2e".into(), vec![], None, 400),
        ("GET", "/runs/..".into(), vec![], None, 400),
        ("GET", "/runs/.".into(), vec![], None, 400),
        ("GET", "/runs/%2Fetc%2Fpasswd".into(), vec![], None, 400),
        ("GET", "/runs/abc%2Fdef".into(), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/..%2F..%2F..%2Fetc"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1%2F..%2F..%2Fx"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/..%5C..%5Cx"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/x/../../etc"), vec![], None, 404),
        ("GET", format!("/runs/{run}/tasks/..%2Fx/events"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/..%2Fx/stream"), vec![], None, 400),
        ("POST", format!("/runs/{run}/tasks/..%2Fx/steer"), vec![], None, 400),
        ("POST", "/runs/..%2Fx/pause".into(), vec![], None, 400),
        ("GET", "/runs/0123456789ab--a%00b".into(), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T%001"), vec![], None, 400),
        ("GET", "/runs/%ff%fe".into(), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/%C3%28"), vec![], None, 400),
        ("GET", "/runs/%zz".into(), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/{}", "a".repeat(1000)), vec![], None, 400),
        // The whole head (1 MB) is over hyper's buffer: 431; a 64 KB URI gets 414 (foundation tests).
        ("GET", format!("/runs/{mb}"), vec![], None, 431),
        ("GET", "/runs".into(), vec![("Host", host.clone()), ("Host", host.clone())], None, 403),
        ("GET", "/runs".into(), vec![("Host", host.clone()), ("Host", "evil.example".into())], None, 403),
        (
            "GET",
            "/runs".into(),
            vec![("Origin", "http://a.example".into()), ("Origin", "http://b.example".into())],
            None,
            403,
        ),
        ("GET", "/runs".into(), vec![("Host", "evil.example".into())], None, 403),
        ("GET", "/runs".into(), vec![("Host", "127.0.0.1".into())], None, 403),
        ("GET", "/runs".into(), vec![("Origin", "null".into())], None, 403),
        ("GET", format!("/runs/{run}/tasks/T1/events?after=-1"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/events?after=NaN"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/events?after=1.0"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/events?after={digits}"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/events?limit=-5"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/events?limit=1e9"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/events?limit=%ff"), vec![], None, 400),
        ("GET", format!("/runs/{run}/tasks/T1/stream"), vec![("Last-Event-ID", digits.clone())], None, 400),
        // Forged forwarding headers change nothing: who the peer is comes from the kernel, not from
        // the request (another uid with them is still 403: tests/it/trust.rs).
        ("GET", "/runs".into(), vec![("X-Forwarded-For", "203.0.113.9".into())], None, 200),
        ("GET", "/runs".into(), vec![("Forwarded", "for=203.0.113.9;host=evil.example;proto=https".into())], None, 200),
        (
            "GET",
            "/runs".into(),
            vec![("X-Forwarded-Host", "evil.example".into()), ("X-Real-IP", "10.0.0.1".into())],
            None,
            200,
        ),
        // A token in both the header and the query: the header wins (a good header with a bad query
        // passes, a bad header with a good query is 401).
        ("GET", "/runs?token=nope".into(), vec![("Authorization", bearer(&token))], None, 200),
        ("GET", format!("/runs?token={token}"), vec![("Authorization", bearer("nope"))], None, 401),
        ("GET", "/runs".into(), vec![("Authorization", bearer(&token[..63]))], None, 401),
        ("GET", "/runs".into(), vec![("Authorization", format!("Basic {token}"))], None, 401),
        ("DELETE", "/runs".into(), vec![], None, 405),
        ("PUT", format!("/runs/{run}"), vec![], None, 405),
        ("GET", format!("/runs/{run}/pause"), vec![], None, 405),
        (
            "POST",
            format!("/runs/{run}/tasks/T1/steer"),
            vec![("Content-Type", "application/json".into())],
            Some(b"\xff\xfe"),
            400,
        ),
        (
            "POST",
            format!("/runs/{run}/tasks/T1/steer"),
            vec![("Content-Type", "application/json".into())],
            Some(b"{\"msg\":\"a\",\"msg\":\"b\"}"),
            409,
        ),
        (
            "POST",
            format!("/runs/{run}/tasks/T1/steer"),
            vec![("Content-Type", "application/xml".into())],
            Some(b"<a/>"),
            415,
        ),
    ];
    let mut tried = 0;
    for (m, p, headers, body, want) in &table {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = http(api.port, m, p, &h, *body);
        assert_eq!(
            r.status,
            *want,
            "{m} {}: {}",
            &p[..p.len().min(80)],
            r.text().chars().take(200).collect::<String>()
        );
        tried += 1;
    }
    // Raw-protocol cases hyper itself must refuse with a 4xx (not a 5xx, not a hang).
    let raws: Vec<Vec<u8>> = vec![
        format!("POST /runs/{run}/pause HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nabcde").into_bytes(),
        format!("POST /runs/{run}/pause HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").into_bytes(),
        format!("GET /runs HTTP/1.1\r\nHost: {host}\r\nX-Big: {}\r\n\r\n", "x".repeat(1 << 20)).into_bytes(),
        b"GARBAGE\r\n\r\n".to_vec(),
        format!("GET /runs HTTP/1.1\r\nHost: {host}\r\nX-Bad: \x01\x02\r\n\r\n").into_bytes(),
    ];
    for raw in &raws {
        let mut s = TcpStream::connect(("127.0.0.1", api.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = s.write_all(raw);
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let status = String::from_utf8_lossy(&buf).split(' ').nth(1).and_then(|c| c.parse::<u16>().ok());
        if let Some(code) = status {
            assert!(
                (400..500).contains(&code),
                "raw request answered {code}: {:?}",
                String::from_utf8_lossy(&buf[..buf.len().min(200)])
            );
        }
        tried += 1;
    }
    // Slowloris: a request head that never finishes is cut off by the header read timeout (10 s).
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", api.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("GET /runs HTTP/1.1\r\nHost: {host}\r\nX-Slow: 1").as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(13), "the server held a half-sent request for {took:?}");
    tried += 1;
    // The API is still healthy after all of it.
    assert_eq!(api.get("/runs").status, 200);
    eprintln!("hostile inputs tried: {tried}; slowloris cut after {took:?}");
}
