//! Benchmark: `harness normalize-events` as a whole process over ≥ 100 MB inputs (claude
//! `tool-partial.jsonl` and codex `tool.jsonl`, repeated), against two baselines measured in the same
//! run: `jq -c '{t: .type, s: (.subtype // .event.type // .item.type)}'` over the same file, and a
//! parse-only pass (serde_json to `IgnoredAny`, per line, including reading the file).
//!
//! Run: `cargo bench --bench normalize` (needs `jq`). Figures printed; nothing asserted.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TARGET: u64 = 100 * 1024 * 1024;

fn build(src: &Path, dst: &Path) -> u64 {
    let one = std::fs::read(src).unwrap();
    let mut out = Vec::with_capacity(TARGET as usize + one.len());
    while (out.len() as u64) < TARGET {
        out.extend_from_slice(&one);
    }
    std::fs::write(dst, &out).unwrap();
    out.len() as u64
}

fn best_of(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..n).map(|_| f()).min().unwrap()
}

fn timed(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let st = cmd.status().expect("spawn");
    assert!(st.success(), "{cmd:?} failed");
    t.elapsed()
}

fn parse_only(path: &Path) -> Duration {
    let t = Instant::now();
    let f = std::fs::File::open(path).unwrap();
    let mut r = std::io::BufReader::with_capacity(1 << 20, f);
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_ok() {
            n += 1;
        }
    }
    assert!(n > 0);
    t.elapsed()
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let have_jq = Command::new("jq").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    for (adapter, fixture) in [("claude", "claude/tool-partial.jsonl"), ("codex", "codex/tool.jsonl")] {
        let input = dir.path().join(format!("{adapter}.jsonl"));
        let bytes = build(&repo.join("fixtures/streams").join(fixture), &input);
        let mb = bytes as f64 / 1e6;
        let ours = best_of(3, || {
            timed(
                Command::new(env!("CARGO_BIN_EXE_harness"))
                    .args(["normalize-events", adapter, "--observed-ts", "2026-11-30T12:00:00.000Z"])
                    .stdin(std::fs::File::open(&input).unwrap())
                    .stdout(Stdio::null()),
            )
        });
        let parse = best_of(3, || parse_only(&input));
        let ours_mbs = mb / ours.as_secs_f64();
        let parse_mbs = mb / parse.as_secs_f64();
        println!("{adapter}: input {mb:.1} MB ({fixture} repeated)");
        println!("  harness normalize-events : {ours_mbs:8.1} MB/s");
        println!(
            "  parse-only (IgnoredAny)  : {parse_mbs:8.1} MB/s   ratio harness/parse-only = {:.2} (goal >= 0.50)",
            ours_mbs / parse_mbs
        );
        if have_jq {
            let jq = best_of(1, || {
                timed(
                    Command::new("jq")
                        .args(["-c", "{t: .type, s: (.subtype // .event.type // .item.type)}"])
                        .arg(&input)
                        .stdout(Stdio::null()),
                )
            });
            let jq_mbs = mb / jq.as_secs_f64();
            println!(
                "  jq -c '{{t:…, s:…}}'      : {jq_mbs:8.1} MB/s   ratio harness/jq = {:.1}x (goal >= 10x)",
                ours_mbs / jq_mbs
            );
        } else {
            println!("  jq: not installed, baseline skipped");
        }
    }
}
