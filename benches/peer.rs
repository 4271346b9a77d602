//! Benchmark of the API's peer-uid lookup (netlink sock_diag for exactly the peer's socket), the
//! work added to every accepted loopback TCP connection:
//! 1. with 1,000 other connections open (so the kernel's socket table is not trivially small), 2,000
//!    accepts each looked up once; median and p99 per lookup (goal median <= 100 us);
//! 2. SSE connect (connect → the stream's `retry:` frame) to a live task, p50/p99 with the check (the
//!    API's own accept loop) and without it (a bench accept loop handing every connection the owner's
//!    uid unlooked), the same API in the same process, the two interleaved in one run.
//!
//! Loopback only. Run: `cargo bench --bench peer`. Figures printed; nothing asserted.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // 2,000 sockets held open at once: above the usual soft limit of 1,024.
    harness::os::service::raise_fd_limit();
    lookup();
    sse_connect();
}

fn lookup() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // 1,000 connections held open for the whole run.
    let mut held = Vec::new();
    for _ in 0..1000 {
        let c = TcpStream::connect(addr).unwrap();
        let (s, _) = listener.accept().unwrap();
        held.push((c, s));
    }
    let me = harness::os::peer::own_uid();
    let mut times = Vec::with_capacity(2000);
    let mut found = 0;
    for _ in 0..2000 {
        let _c = TcpStream::connect(addr).unwrap();
        let (s, peer) = listener.accept().unwrap();
        let local = s.local_addr().unwrap();
        let t = Instant::now();
        let uid = harness::os::peer::tcp_peer_uid(local, peer);
        times.push(t.elapsed());
        if uid == Some(me) {
            found += 1;
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let p50 = pct(&mut times, 0.5);
    let p99 = pct(&mut times, 0.99);
    println!(
        "peer-uid lookup with {} other connections open: {found}/2000 found our uid; median {:.1} us, p99 {:.1} us, max {:.1} us [goal median <= 100 us]",
        held.len(),
        us(p50),
        us(p99),
        us(*times.iter().max().unwrap())
    );
}

/// Time from connect until the stream's `retry:` frame.
fn connect_sse(port: u16, path: &str) -> Duration {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nLast-Event-ID: 3\r\n\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("stream closed before its retry frame");
        }
        if line.starts_with("retry:") {
            return t.elapsed();
        }
    }
}

fn sse_connect() {
    use harness::api::guard::{Conn, Via};
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    let (run, _logs, _guard) = support::hanging_run(d.path(), &home, "peerbench", 1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let api = Arc::new(harness::api::Api::new(
        harness::os::home::Home::at(&home),
        harness::api::Config::default(),
        shutdown.clone(),
    ));
    let (checked, unchecked) = rt.block_on(async {
        let checked = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let unchecked = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        (checked, unchecked)
    });
    let checked_port = checked.local_addr().unwrap().port();
    let unchecked_port = unchecked.local_addr().unwrap().port();
    rt.spawn(harness::api::serve_on(
        api.clone(),
        vec![harness::api::Listener::Tcp(checked)],
        shutdown,
        Duration::from_secs(1),
    ));
    let me = harness::os::peer::own_uid();
    let a = api.clone();
    rt.spawn(async move {
        loop {
            let Ok((s, _)) = unchecked.accept().await else { continue };
            let _ = s.set_nodelay(true);
            let conn = Conn {
                via: Via::Tcp(unchecked_port),
                uid: Some(me),
                origin: harness::api::guard::Origin::Unknown,
                tokened: false,
            };
            let api = a.clone();
            let svc = hyper::service::service_fn(move |req| harness::api::handle(api.clone(), conn, req));
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    // 1,000 connections held open on another listener: the socket table the lookup searches.
    let filler = TcpListener::bind("127.0.0.1:0").unwrap();
    let held: Vec<_> = (0..1000)
        .map(|_| {
            let c = TcpStream::connect(filler.local_addr().unwrap()).unwrap();
            (c, filler.accept().unwrap())
        })
        .collect();
    let path = format!("/runs/{run}/tasks/T0/stream");
    for _ in 0..50 {
        connect_sse(checked_port, &path);
        connect_sse(unchecked_port, &path);
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..1000 {
        with.push(connect_sse(checked_port, &path));
        without.push(connect_sse(unchecked_port, &path));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (w50, w99) = (pct(&mut with, 0.5), pct(&mut with, 0.99));
    let (o50, o99) = (pct(&mut without, 0.5), pct(&mut without, 0.99));
    println!(
        "SSE connect with {} other connections open, 1,000 each, interleaved: with the uid check p50 {:.3} ms, p99 {:.3} ms; without p50 {:.3} ms, p99 {:.3} ms; p99 ratio {:.2}x, p50 ratio {:.2}x",
        held.len(),
        ms(w50),
        ms(w99),
        ms(o50),
        ms(o99),
        ms(w99) / ms(o99),
        ms(w50) / ms(o50)
    );
    drop(rt);
}
