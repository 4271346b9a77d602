//! `harness demo`: a newcomer's first command. Makes a scratch git repo and harness home, starts a
//! supervised run of the bundled example plan (`fixtures/demo/plan.json`) whose engines are the fake
//! engines replaying real captures at their recorded pace, serves the API over it, prints the
//! commands to watch, steer and kill it, and narrates the journal as the run moves. Ctrl-C stops the
//! run and the API. Nothing outside the scratch directory is touched.

use crate::engine::Adapter;
use crate::ids::RunId;
use crate::os::home::Home;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PLAN: &str = include_str!("../fixtures/demo/plan.json");

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["-c", "user.name=harness demo", "-c", "user.email=demo@localhost"];
    all.extend_from_slice(args);
    crate::os::git::run(dir, &all).map(|_| ()).map_err(|e| format!("{e} (the demo needs git)"))
}

/// The fixtures directory (fake engines): `$HARNESS_FIXTURES`, else the source tree's.
fn fixtures() -> Result<PathBuf, String> {
    let dir = std::env::var_os("HARNESS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"));
    if dir.join("engines/fake-claude").is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "the demo needs the fake engines in {}/engines: run it from a clone of the repository, or set HARNESS_FIXTURES",
            dir.display()
        ))
    }
}

/// How fast the fake engines replay their captures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// The captures' own timing.
    Recorded,
    /// No waiting.
    Fast,
    /// This many seconds per line.
    PerLine(f64),
}

impl std::str::FromStr for Pace {
    type Err = String;
    fn from_str(s: &str) -> Result<Pace, String> {
        match s {
            "recorded" => Ok(Pace::Recorded),
            "fast" => Ok(Pace::Fast),
            _ => match s.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(Pace::PerLine(x)),
                _ => Err(format!("{s:?}: expected recorded, fast or seconds per line")),
            },
        }
    }
}

impl Pace {
    /// `HARNESS_FAKE_PACE` and `HARNESS_FAKE_SLOW_PACE` for the fake engines.
    fn env(self) -> (String, String) {
        match self {
            Pace::Recorded => ("recorded".into(), "0.8".into()),
            Pace::Fast => ("fast".into(), "0".into()),
            Pace::PerLine(x) => (x.to_string(), x.to_string()),
        }
    }
}

pub fn run(dir: Option<PathBuf>, listen: SocketAddr, pace: Pace) -> Result<(), String> {
    if !listen.ip().is_loopback() {
        return Err(format!("--listen {listen}: the demo only listens on loopback"));
    }
    let fixtures = fixtures()?;
    let wrappers = crate::wrapper::wrappers_dir()?;
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("harness-demo-{}", std::process::id())),
    };
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("src")).map_err(|e| format!("{}: {e}", repo.display()))?;
    let dir = crate::os::home::canonical_dir(&dir).map_err(|e| e.to_string())?;
    let repo = dir.join("repo");
    let home = Home::at(dir.join("home"));
    home.ensure().map_err(|e| e.to_string())?;
    if !repo.join(".git").exists() {
        git(&repo, &["init", "-q", "-b", "main"])?;
        std::fs::write(repo.join("README.md"), "# greet\n\nA tiny project for the harness demo.\n")
            .map_err(|e| e.to_string())?;
        std::fs::write(repo.join("src/greet.sh"), "#!/bin/sh\n# greet NAME\n").map_err(|e| e.to_string())?;
        git(&repo, &["add", "-A"])?;
        git(&repo, &["commit", "-q", "-m", "initial commit"])?;
    }
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, PLAN).map_err(|e| e.to_string())?;
    let launch = crate::runner::Launch {
        plan_path: &plan_path,
        repo: Some(&repo),
        worktree: None,
        project: Some("harness-demo"),
        supervised: true,
        slug: None,
        preflight: false,
    };
    let (_plan, pointer) = crate::runner::register(&home, &launch).map_err(|e| e.to_string())?;
    let id = pointer.run_id.clone();
    let engines = fixtures.join("engines");
    let fake = |a: &Adapter| (a.binary_env().to_string(), engines.join(a.fake_engine()).display().to_string());
    let mut envs: Vec<(String, String)> = Adapter::ALL.iter().map(fake).collect();
    envs.extend([
        ("HARNESS_FAKE_PACE".into(), pace.env().0),
        ("HARNESS_FAKE_SLOW_PACE".into(), pace.env().1),
        ("HARNESS_FAKE_WRITE".into(), "1".into()),
        ("HARNESS_WRAPPERS".into(), wrappers.display().to_string()),
    ]);
    let args = ["--linger", "10m", "--kill-grace", "2s"].map(String::from);
    // Bind the API before starting the run, so a busy port fails before anything runs.
    let std_listener = std::net::TcpListener::bind(listen)
        .map_err(|e| format!("cannot listen on {listen}: {e} (pass --listen 127.0.0.1:0 for any free port)"))?;
    let addr = std_listener.local_addr().map_err(|e| e.to_string())?;
    crate::runner::start_detached(&home, &pointer, &args, &envs).map_err(|e| e.to_string())?;
    let hx = |s: &str| format!("HARNESS_HOME={} HARNESS_API_ADDR={addr} harness {s}", home.root.display());
    let say = crate::term::out;
    say(&format!("harness demo: run {id}"));
    say(&format!("  repo {}   (git log shows one commit per task)", repo.display()));
    say(&format!("  API  http://{addr}   (Ctrl-C stops the run and the API)"));
    say("");
    say("In another terminal (from this checkout, `cargo run --` works in place of `harness`):");
    say(&format!("  {}", hx("runs")));
    say(&format!("  {}", hx(&format!("watch {id} greet"))));
    say(&format!("  {}", hx(&format!("steer {id} docs \"mention the exit code\""))));
    say(&format!("  {}", hx(&format!("kill {id} tests"))));
    say(&format!("  {}", hx(&format!("pause {id}"))));
    say(&format!("  curl -s http://{addr}/runs/{id}"));
    say(&format!("  curl -sN http://{addr}/runs/{id}/tasks/greet/stream"));
    say("");

    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let narrator = tokio::spawn(narrate(pointer.journal_path()));
        let stop_run = async {
            crate::os::service::terminated().await;
            say("harness demo: stopping the run and the API");
            stop(&home, &id).await;
        };
        let opts = crate::api::ServeOptions {
            cfg: crate::api::Config::default(),
            tcp: Vec::new(),
            unix: None,
            bound: vec![std_listener],
            grace: Duration::from_secs(3),
            reload_token: false,
        };
        let served = crate::api::serve(home.clone(), opts, Vec::new(), stop_run).await;
        narrator.abort();
        served.map_err(|e| e.to_string())?;
        say(&format!("harness demo: done; its files stay in {}", dir.display()));
        Ok(())
    })
}

/// Prints each journal record as it is appended: the run's story in the demo's terminal.
async fn narrate(journal: PathBuf) {
    let index = crate::os::tail::LineIndex::default();
    let Ok(mut tail) = crate::os::tail::Tail::at_line(&index, &journal, 1) else { return };
    loop {
        if let Ok((lines, _)) = tail.read_available(1 << 16) {
            for (_, line) in lines {
                if let Ok(rec) = crate::state::journal::parse_line(&line) {
                    crate::term::out(&narration(&rec));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn narration(rec: &crate::state::journal::Record) -> String {
    use crate::state::journal::Body;
    let t = rec.ts.get(11..19).unwrap_or(&rec.ts);
    match &rec.body {
        Body::Run(r) => {
            format!("{t}  run {:?}{}", r.event, r.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())
                .to_lowercase()
        }
        Body::Task(k) => format!(
            "{t}  {:<6} {}{}",
            k.task.as_str(),
            k.state,
            k.detail.as_ref().map(|d| format!("  ({d})")).unwrap_or_default()
        ),
        Body::Control(c) => format!(
            "{t}  {} {}{} by {} → {:?}",
            c.verb.as_str(),
            c.task.as_ref().map(|x| x.as_str()).unwrap_or("run"),
            c.msg.as_ref().map(|m| format!(" \"{m}\"")).unwrap_or_default(),
            c.by,
            c.outcome
        )
        .to_lowercase(),
        Body::Approval(a) => format!(
            "{t}  {:<6} approval {} {}{}",
            a.task.as_str(),
            a.tool.as_deref().unwrap_or(""),
            a.state.as_str(),
            a.by.as_ref().map(|b| format!(" by {b}")).unwrap_or_default()
        ),
        Body::Attention(a) => format!(
            "{t}  {:<6} {}{}",
            a.task.as_str(),
            a.attention,
            a.detail.as_ref().map(|d| format!("  ({d})")).unwrap_or_default()
        ),
    }
}

async fn stop(home: &Home, id: &RunId) {
    let req = crate::control::Request::new(crate::control::Act::Stop(crate::control::Stop), Some("demo".into()));
    let _ = crate::control::request(&home.socket_path(id), &req, crate::timeouts::DEMO_STOP).await;
}
