//! A real NATS JetStream cluster on loopback, started by the test (`nats-server`, Debian's 2.9):
//! three nodes on free ports, each its own store in a temp dir, stopped on drop. Where nats-server
//! is missing the fleet tests say `SKIPPED` and pass — except under `.ci/run`
//! (`HARNESS_REQUIRE_NATS=1`), which installs it, where that is a failure.

use super::wait_for;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One node: its ports, store and process (`None` while stopped).
struct Node {
    name: String,
    client: u16,
    route: u16,
    dir: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    _tmp: tempfile::TempDir,
    nodes: Vec<Node>,
    routes: String,
    /// Extra arguments for every node (a config file, say).
    extra: Vec<String>,
}

/// A free loopback port (bound and released: another program could take it in between, which
/// only makes a test fail loudly, never touch a fixed port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The server binary: on PATH, else where Debian puts it (`/usr/sbin`, not on a user's PATH).
fn server() -> &'static str {
    let on_path = Command::new("nats-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if on_path.is_ok() { "nats-server" } else { "/usr/sbin/nats-server" }
}

/// Whether nats-server is here; `false` (the test skips) outside CI, a panic under CI.
pub fn available() -> bool {
    if Command::new(server()).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok() {
        return true;
    }
    if std::env::var("HARNESS_REQUIRE_NATS").as_deref() == Ok("1") {
        panic!("nats-server is required here (HARNESS_REQUIRE_NATS=1) and is not installed");
    }
    eprintln!("SKIPPED: no nats-server (apt-get install nats-server)");
    false
}

impl Cluster {
    /// Starts `n` nodes (1: a single server, no cluster) and waits until JetStream is ready.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, &[])
    }

    pub fn start_with(n: usize, extra: &[&str]) -> Cluster {
        Cluster::start_in(tempfile::tempdir().unwrap(), n, extra)
    }

    /// `n` nodes of the server configuration `conf` (its text: authorization, max_payload…).
    pub fn start_conf(n: usize, conf: &str) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("nats.conf");
        std::fs::write(&path, conf).unwrap();
        Cluster::start_in(tmp, n, &["-c", path.to_str().unwrap()])
    }

    fn start_in(tmp: tempfile::TempDir, n: usize, extra: &[&str]) -> Cluster {
        let nodes: Vec<Node> = (0..n)
            .map(|i| Node {
                name: format!("n{i}"),
                client: free_port(),
                route: free_port(),
                dir: tmp.path().join(format!("n{i}")),
                child: None,
            })
            .collect();
        let routes = nodes.iter().map(|nd| format!("nats://127.0.0.1:{}", nd.route)).collect::<Vec<_>>().join(",");
        let mut c = Cluster { _tmp: tmp, nodes, routes, extra: extra.iter().map(|s| s.to_string()).collect() };
        for i in 0..n {
            c.spawn(i);
        }
        c.wait_ready();
        c
    }

    fn spawn(&mut self, i: usize) {
        let clustered = self.nodes.len() > 1;
        let nd = &mut self.nodes[i];
        std::fs::create_dir_all(&nd.dir).unwrap();
        let log = std::fs::File::options().create(true).append(true).open(nd.dir.join("log")).unwrap();
        let mut cmd = Command::new(server());
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &nd.client.to_string(), "-sd"]).arg(&nd.dir).args(["-n", &nd.name]);
        if clustered {
            cmd.args([
                "--cluster_name",
                "hc",
                "-cluster",
                &format!("nats://127.0.0.1:{}", nd.route),
                "-routes",
                &self.routes,
            ]);
        }
        cmd.args(&self.extra);
        nd.child = Some(cmd.stdout(Stdio::null()).stderr(log).spawn().expect("start nats-server"));
    }

    /// Waits until every running node serves JetStream (a meta leader is elected).
    fn wait_ready(&self) {
        wait_for(Duration::from_secs(30), || {
            let logs: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| std::fs::read_to_string(n.dir.join("log")).unwrap_or_default())
                .collect();
            let ready = if self.nodes.len() > 1 {
                logs.iter().any(|l| l.contains("JetStream cluster new metadata leader"))
                    && logs.iter().all(|l| l.contains("Server is ready"))
            } else {
                logs.iter().all(|l| l.contains("Server is ready"))
            };
            ready.then_some(())
        })
        .unwrap_or_else(|| panic!("nats-server did not get ready:\n{}", self.logs()));
    }

    /// Every node's URL, comma-separated (what `--nats` takes).
    pub fn url(&self) -> String {
        self.nodes.iter().map(|n| format!("nats://127.0.0.1:{}", n.client)).collect::<Vec<_>>().join(",")
    }

    /// Kills node `i` (SIGKILL: a node lost).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops every node (the whole cluster down).
    pub fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }

    /// Starts node `i` again on its ports and store.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
    }

    /// Starts every stopped node and waits for JetStream.
    pub fn start_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.spawn(i);
            }
        }
        self.wait_ready_again();
    }

    /// After a restart the logs hold the old lines too: wait for as many "ready" lines as starts.
    fn wait_ready_again(&self) {
        wait_for(Duration::from_secs(60), || {
            let ok = self.nodes.iter().all(|n| {
                let l = std::fs::read_to_string(n.dir.join("log")).unwrap_or_default();
                l.matches("Server is ready").count() >= 2
            });
            ok.then_some(())
        })
        .unwrap_or_else(|| panic!("nats-server did not get ready again:\n{}", self.logs()));
        std::thread::sleep(Duration::from_secs(2));
    }

    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {}\n{}", n.name, tail(&n.dir.join("log"))))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn tail(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
