//! Benchmark of the API's peer-uid lookup (netlink sock_diag for exactly the peer's socket), the
//! work added to every accepted loopback TCP connection: with 1,000 other connections open (so the
//! kernel's socket table is not trivially small), 2,000 accepts each looked up once; median and p99
//! per lookup (goal median <= 100 us). Loopback only.
//!
//! Run: `cargo bench --bench peer`. Figures printed; nothing asserted.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // 2,000 sockets held open at once: above the usual soft limit of 1,024.
    harness::service::raise_fd_limit();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // 1,000 connections held open for the whole run.
    let mut held = Vec::new();
    for _ in 0..1000 {
        let c = TcpStream::connect(addr).unwrap();
        let (s, _) = listener.accept().unwrap();
        held.push((c, s));
    }
    let me = harness::peer::own_uid();
    let mut times = Vec::with_capacity(2000);
    let mut found = 0;
    for _ in 0..2000 {
        let _c = TcpStream::connect(addr).unwrap();
        let (s, peer) = listener.accept().unwrap();
        let local = s.local_addr().unwrap();
        let t = Instant::now();
        let uid = harness::peer::tcp_peer_uid(local, peer);
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
