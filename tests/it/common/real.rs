//! The real Claude Code and Codex CLIs, pointed at the local model stand-in: where the pinned
//! installs are (`HARNESS_CLAUDE_BIN` / `HARNESS_CODEX_BIN`, set by `.ci/run`) and the environment
//! that keeps them offline (temp `HOME` and `CODEX_HOME`, the stand-in as their API).
#![allow(dead_code)]

use super::standin::StandIn;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned versions `.ci/run` installs.
pub const CLAUDE_VERSION: &str = "2.1.332";
pub const CODEX_VERSION: &str = "0.171.0";

/// The real CLIs: `None` when not installed here. When `HARNESS_REQUIRE_REAL_ENGINES=1` (`.ci/run`
/// sets it) a missing CLI is a failure, not a skip.
pub fn engines() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, name: &str| -> Option<PathBuf> {
        let p = std::env::var_os(var).map(PathBuf::from).or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(".cache/harness-clis/node_modules/.bin").join(name))
        })?;
        p.is_file().then_some(p)
    };
    let found = find("HARNESS_CLAUDE_BIN", "claude").zip(find("HARNESS_CODEX_BIN", "codex"));
    if found.is_none() {
        let msg = "the real CLIs are not installed: set HARNESS_CLAUDE_BIN and HARNESS_CODEX_BIN (`bash .ci/run` \
                   installs @anthropic-ai/claude-code@2.1.332 and @openai/codex@0.171.0 into ~/.cache/harness-clis)";
        if std::env::var("HARNESS_REQUIRE_REAL_ENGINES").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED: {msg}");
    }
    found
}

/// The offline environment of both CLIs, in `dir`: a temp `HOME` for claude and a `CODEX_HOME` whose
/// config.toml makes the stand-in codex's model provider.
pub struct RealEnv {
    pub claude: PathBuf,
    pub codex: PathBuf,
    pub home: PathBuf,
    pub codex_home: PathBuf,
    pub base_url: String,
}

impl RealEnv {
    pub fn new(dir: &Path, standin: &StandIn) -> Option<RealEnv> {
        let (claude, codex) = engines()?;
        let home = dir.join("engine-home");
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(
            codex_home.join("config.toml"),
            format!(
                "model = \"gpt-5.5\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\n\
                 base_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"MOCK_KEY\"\n\
                 request_max_retries = 1\nstream_max_retries = 1\n",
                standin.base_url()
            ),
        )
        .unwrap();
        Some(RealEnv { claude, codex, home, codex_home, base_url: standin.base_url() })
    }

    /// The variables that point both CLIs (and the wrappers) at the stand-in.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HARNESS_CLAUDE_BIN", self.claude.display().to_string()),
            ("HARNESS_CODEX_BIN", self.codex.display().to_string()),
            ("HOME", self.home.display().to_string()),
            ("CODEX_HOME", self.codex_home.display().to_string()),
            ("ANTHROPIC_BASE_URL", self.base_url.clone()),
            ("ANTHROPIC_API_KEY", "dummy".into()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("CLAUDE_CODE_MAX_RETRIES", "2".into()),
            ("MOCK_KEY", "dummy".into()),
            // The wrappers scope the engine's environment; the stand-in's key must get through.
            ("HARNESS_ENV_PASS", "MOCK_KEY".into()),
        ]
    }

    pub fn apply(&self, c: &mut Command) {
        for (k, v) in self.vars() {
            c.env(k, v);
        }
    }
}
