//! Who is on the other end of an accepted connection: the peer process's uid. A Unix socket tells it
//! directly (`SO_PEERCRED`); for a loopback TCP connection the kernel's socket table knows the uid
//! that owns the peer's socket, and netlink `sock_diag` asks it for exactly that socket (its 4-tuple
//! seen from its own side): one request, one answer, no scan of `/proc/net/tcp`. Anything it cannot
//! tell (not loopback, another OS, an error) is `None`, and callers fail closed. Decides nothing.

use std::net::{IpAddr, SocketAddr};

/// The uid owning the socket at `peer` connected to `local` (both ends on this machine).
pub fn tcp_peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    tcp_peer(local, peer).map(|(uid, _)| uid)
}

/// The uid owning the socket at `peer` connected to `local`, and that socket's inode (which
/// `socket_holder` turns into the process holding it).
#[cfg(target_os = "linux")]
pub fn tcp_peer(local: SocketAddr, peer: SocketAddr) -> Option<(u32, u32)> {
    // A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1: the kernel's table holds it
    // as IPv4.
    let local = SocketAddr::new(local.ip().to_canonical(), local.port());
    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
    if !peer.ip().is_loopback() || !local.ip().is_loopback() {
        return None;
    }
    diag::lookup(local, peer).ok().flatten()
}

#[cfg(not(target_os = "linux"))]
pub fn tcp_peer(_local: SocketAddr, _peer: SocketAddr) -> Option<(u32, u32)> {
    None
}

/// A process holding the socket with `inode` open (`/proc/<pid>/fd/* -> socket:[inode]`), among
/// the processes this one may look into (its own uid's; every one for root). `None` when no such
/// process is seen. A scan of `/proc`: for the few requests that need to know who sent them.
pub fn socket_holder(inode: u32) -> Option<u32> {
    let want = format!("socket:[{inode}]");
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// (state, ppid, pgrp) of a pid from `/proc/<pid>/stat` (`None`: gone, or no `/proc`). The
/// command name may hold spaces and parentheses: the fields follow its last `)`.
pub fn stat_fields(pid: i32) -> Option<(char, i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// `pid`'s parent (`None`: gone, or no `/proc`).
pub fn parent_of(pid: u32) -> Option<u32> {
    let (_, ppid, _) = stat_fields(i32::try_from(pid).ok()?)?;
    u32::try_from(ppid).ok()
}

/// `pid` and its ancestors, nearest first, down to pid 1 (included: a supervisor may be a
/// container's init): who a process descends from, which `setsid` does not change. `None` when the
/// line cannot be followed to its root — the process (or an ancestor) is gone, `/proc` is not there
/// — so a caller deciding on it fails closed. At most 4,096 steps.
pub fn ancestry(pid: u32) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    let mut p = pid;
    while p > 0 {
        if out.len() >= 4096 || out.contains(&p) {
            return None;
        }
        out.push(p);
        if p == 1 {
            break;
        }
        p = parent_of(p)?;
    }
    (!out.is_empty()).then_some(out)
}

/// This process's effective uid (the owner every peer is compared with).
pub fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// An address as `inet_diag_sockid` holds it: four big-endian words (IPv4 in the first).
fn diag_words(ip: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
    }
    out
}

#[cfg(target_os = "linux")]
mod diag {
    use super::diag_words;
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
    };
    use std::net::SocketAddr;
    use std::os::fd::AsRawFd;

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    const IPPROTO_TCP: u8 = 6;
    /// `nlmsghdr` (16) + `inet_diag_req_v2` (56).
    const REQUEST_LEN: usize = 72;
    /// Offset of `idiag_uid` in the answer: `nlmsghdr` (16) + family, state, timer, retrans (4) +
    /// `inet_diag_sockid` (48) + expires, rqueue, wqueue (12).
    const UID_AT: usize = 80;
    /// `idiag_inode`, after the uid.
    const INODE_AT: usize = 84;
    /// `idiag_state`, after the family.
    const STATE_AT: usize = 17;
    const TCP_TIME_WAIT: u8 = 6;

    /// Asks for the one TCP socket whose own address is `peer` and whose remote is `local`.
    pub(super) fn lookup(local: SocketAddr, peer: SocketAddr) -> nix::Result<Option<(u32, u32)>> {
        let fd =
            socket(AddressFamily::Netlink, SockType::Datagram, SockFlag::SOCK_CLOEXEC, SockProtocol::NetlinkSockDiag)?;
        let family: u8 = if peer.is_ipv4() { libc::AF_INET as u8 } else { libc::AF_INET6 as u8 };
        let mut req = [0u8; REQUEST_LEN];
        req[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        req[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
        // inet_diag_req_v2
        req[16] = family;
        req[17] = IPPROTO_TCP;
        req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
        // inet_diag_sockid: the peer's socket, seen from its side.
        req[24..26].copy_from_slice(&peer.port().to_be_bytes());
        req[26..28].copy_from_slice(&local.port().to_be_bytes());
        req[28..44].copy_from_slice(&diag_words(peer.ip()));
        req[44..60].copy_from_slice(&diag_words(local.ip()));
        req[64..72].copy_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
        sendto(fd.as_raw_fd(), &req, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
        let mut buf = [0u8; 512];
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        if n < INODE_AT + 4 {
            return Ok(None);
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY {
            return Ok(None);
        }
        // A socket no process holds (a timewait entry, an orphan the client closed before our
        // accept) reports uid 0 and inode 0: that says nothing of who asked, so it is unknown.
        let word = |at: usize| u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        if buf[STATE_AT] == TCP_TIME_WAIT || word(INODE_AT) == 0 {
            return Ok(None);
        }
        Ok(Some((word(UID_AT), word(INODE_AT))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_peer_is_found_with_our_uid_over_v4_and_v6() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(addr) else { continue };
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, peer) = l.accept().unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            assert_eq!(tcp_peer_uid(s.local_addr().unwrap(), peer), Some(own_uid()), "{addr}");
        }
    }

    #[test]
    fn a_timewait_or_orphaned_peer_is_unknown_not_uid_0() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let client = c.local_addr().unwrap();
        // The client closes first; once the server closes too, the client's side is in TIME_WAIT.
        drop(c);
        let (mut s, _) = l.accept().unwrap();
        let local = s.local_addr().unwrap();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap(), 0);
        drop(s);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(tcp_peer_uid(local, client), None);
    }

    #[test]
    fn the_peer_socket_leads_to_its_holder_and_its_ancestry_to_us() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // A child process holds the client socket: found by its inode, and it descends from us.
        let port = l.local_addr().unwrap().port();
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}; sleep 30"))
            .spawn()
            .unwrap();
        let (s, peer) = l.accept().unwrap();
        let (uid, inode) = tcp_peer(s.local_addr().unwrap(), peer).expect("the peer is found");
        assert_eq!(uid, own_uid());
        let holder = socket_holder(inode).expect("a holder");
        let chain = ancestry(holder).expect("a live process's line");
        assert!(chain.contains(&std::process::id()), "{holder}'s ancestry {chain:?} reaches us");
        let _ = child.kill();
        let _ = child.wait();
        let mine = ancestry(std::process::id()).unwrap();
        assert_eq!((mine[0], *mine.last().unwrap()), (std::process::id(), 1), "{mine:?}");
        assert_eq!(ancestry(holder), None, "a process that is gone cannot be placed");
    }

    #[test]
    fn an_unknown_socket_is_none() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(tcp_peer_uid(l.local_addr().unwrap(), nobody), None);
    }
}
