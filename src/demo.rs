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

/// The fixtures directory (fake engines and the captures they replay): `$HARNESS_FIXTURES`, else
/// the package's `/usr/share/harness/fixtures` or a checkout's `fixtures/` (`wrapper::shared_dir`).
fn fixtures() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("HARNESS_FIXTURES").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        return if d.join("engines/fake-claude").is_file() {
            Ok(d)
        } else {
            Err(format!("HARNESS_FIXTURES={} holds no engines/fake-claude", d.display()))
        };
    }
    crate::wrapper::shared_dir("fixtures", "engines/fake-claude").map_err(|tried| {
        format!(
            "the demo needs its fake engines (tried {}): install the package, run it from a clone of the repository, or set HARNESS_FIXTURES",
            tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    })
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

/// The demo's API: `--listen`, else 127.0.0.1:7878 when it is free, else any free port (the
/// printed commands reach it through the demo home's `sock/api.sock` either way).
fn bind(listen: Option<SocketAddr>) -> Result<std::net::TcpListener, String> {
    if let Some(a) = listen {
        if !a.ip().is_loopback() {
            return Err(format!("--listen {a}: the demo only listens on loopback"));
        }
        return std::net::TcpListener::bind(a)
            .map_err(|e| format!("cannot listen on {a}: {e} (pass --listen 127.0.0.1:0 for any free port)"));
    }
    std::net::TcpListener::bind(crate::config::DEFAULT_API_ADDR)
        .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))
}

/// The demo's plan: the bundled one, whose last task waits for the operator's steer — except at
/// `--pace fast`, which runs straight to the end.
fn plan_text(pace: Pace) -> String {
    if pace == Pace::Fast { PLAN.replace("[fake-claude:hang]", "[fake-claude:success]") } else { PLAN.to_string() }
}

pub fn run(dir: Option<PathBuf>, listen: Option<SocketAddr>, pace: Pace) -> Result<(), String> {
    // The API serves on whether or not anyone reads the narration.
    crate::term::outlive_stdout();
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
    std::fs::write(&plan_path, plan_text(pace)).map_err(|e| e.to_string())?;
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
    let std_listener = bind(listen)?;
    let addr = std_listener.local_addr().map_err(|e| e.to_string())?;
    crate::runner::start_detached(&home, &pointer, &args, &envs).map_err(|e| e.to_string())?;
    banner(&home, &repo, &id, addr, pace);
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let narrator = crate::progress::Progress::of(&pointer.journal_path(), false).map(|p| tokio::spawn(p.follow()));
        let stop_run = async {
            crate::os::service::terminated().await;
            crate::term::out("harness demo: stopping the run and the API");
            stop(&home, &id).await;
        };
        let opts = crate::api::ServeOptions {
            fleet: None,
            cfg: crate::api::Config::default(),
            tcp: Vec::new(),
            unix: Some(home.sock_dir().join("api.sock")),
            bound: vec![std_listener],
            grace: Duration::from_secs(3),
            reload_token: false,
        };
        let served = crate::api::serve(home.clone(), opts, Vec::new(), stop_run).await;
        if let Some(n) = narrator {
            n.abort();
        }
        served.map_err(|e| e.to_string())?;
        crate::term::out(&format!("harness demo: done; its files stay in {}", dir.display()));
        Ok(())
    })
}

/// What the demo prints first: where things are, and the commands to try — with the path of the
/// binary that runs (a package's `/usr/bin/harness`, a checkout's `target/…/harness`).
fn banner(home: &Home, repo: &Path, id: &RunId, addr: SocketAddr, pace: Pace) {
    let exe = std::env::current_exe().map_or_else(|_| "harness".into(), |p| p.display().to_string());
    let hx = |s: &str| format!("HARNESS_HOME={} {exe} {s}", home.root.display());
    let say = crate::term::out;
    say(&format!("harness demo: run {id}"));
    say(&format!("  binary {exe}"));
    say(&format!("  repo   {}   (git log shows one commit per task)", repo.display()));
    say(&format!(
        "  API    http://{addr} and {}/sock/api.sock   (Ctrl-C stops the run and the API)",
        home.root.display()
    ));
    say("");
    say("In another terminal:");
    say(&format!("  {}", hx("top")));
    say(&format!("  {}", hx(&format!("watch {id} greet"))));
    say(&format!("  {}", hx(&format!("show {id} greet"))));
    say(&format!("  {}", hx(&format!("pause {id}"))));
    say(&format!("  {}", hx(&format!("diff {id} greet"))));
    // The one steer printed is polish's: it waits for it, so it works whenever it is typed (the
    // other tasks end on their own, and a steer to a finished task is refused).
    if pace != Pace::Fast {
        say("The last task, polish, waits for you (wave 4): steer it and it finishes the run,");
        say(&format!("  {}", hx(&format!("steer {id} polish --interrupt \"say hello in French too\""))));
        say(&format!("  or {}", hx(&format!("kill {id} polish"))));
    }
    say(&format!("  curl -sN http://{addr}/runs/{id}/tasks/greet/stream"));
    say(
        "Pace: `--pace fast` runs straight through; `--pace 2` takes 2 s per engine line (default: the captures' own timing).",
    );
    say("");
}

async fn stop(home: &Home, id: &RunId) {
    let req = crate::control::Request::new(crate::control::Act::Stop(crate::control::Stop), Some("demo".into()));
    let _ = crate::control::request(&home.socket_path(id), &req, crate::timeouts::DEMO_STOP).await;
}
