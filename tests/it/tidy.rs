//! Tidy: the architecture's invariants, held by reading `src/` (rust-analyzer's tidy test is the
//! model). Each rule is a function over (path, source) so the rules themselves are tested on small
//! bad inputs below: a rule that cannot fail would hold nothing. ARCHITECTURE.md lists the rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, as (path relative to `src/`, source).
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| (p.strip_prefix(&src).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

/// The source without `//` comments (doc comments included), so prose never trips a rule.
fn code(src: &str) -> String {
    src.lines().map(|l| if let Some(i) = l.find("//") { &l[..i] } else { l }).collect::<Vec<_>>().join("\n")
}

/// The top-level module a file belongs to: `supervisor/verbs.rs` → `supervisor`.
fn top_module(path: &str) -> String {
    path.split('/').next().unwrap().trim_end_matches(".rs").to_string()
}

/// Top-level modules this file names through `crate::…` (paths and `use crate::{a, b}` groups).
fn crate_deps(src: &str) -> BTreeSet<String> {
    let c = code(src);
    let mut deps = BTreeSet::new();
    let mut rest = c.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    deps.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                deps.insert(name);
            }
        }
    }
    deps
}

/// Rule: every file opens with a `//!` header saying what it owns and what it never does.
fn header(path: &str, src: &str) -> Vec<String> {
    if src.trim_start().starts_with("//!") { vec![] } else { vec![format!("{path}: no `//!` header")] }
}

/// Rule: no module imports `cli` (the CLI is a leaf: it calls the library, never the reverse).
fn no_cli_import(path: &str, src: &str) -> Vec<String> {
    if top_module(path) == "cli" || path == "main.rs" || path == "lib.rs" {
        return vec![];
    }
    if crate_deps(src).contains("cli") { vec![format!("{path}: imports `crate::cli`")] } else { vec![] }
}

/// Rule: the normalizer, the event types, the usage fold and the views are pure: no I/O, no clock,
/// no global state.
fn pure(path: &str, src: &str) -> Vec<String> {
    if !(path.starts_with("engine/") || path == "events.rs" || path == "views.rs") {
        return vec![];
    }
    const FORBIDDEN: &[(&str, &str)] = &[
        ("std::fs", "I/O"),
        ("std::io::", "I/O"),
        ("std::net", "I/O"),
        ("std::process", "I/O"),
        ("std::env", "I/O (the environment)"),
        ("tokio", "I/O"),
        ("File::", "I/O"),
        ("println!", "I/O"),
        ("eprintln!", "I/O"),
        ("tracing::", "I/O (logging)"),
        ("SystemTime::now", "a clock"),
        ("Instant::now", "a clock"),
        ("now_rfc3339", "a clock"),
        (".elapsed()", "a clock"),
        ("thread_local!", "a global"),
        ("OnceLock", "a global"),
        ("LazyLock", "a global"),
        ("lazy_static", "a global"),
        ("Atomic", "a global"),
    ];
    let c = code(src);
    let mut out: Vec<String> = FORBIDDEN
        .iter()
        .filter(|(pat, _)| c.contains(pat))
        .map(|(pat, what)| format!("{path}: uses {what} (`{pat}`)"))
        .collect();
    for l in c.lines() {
        let t = l.trim_start().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
        if t.starts_with("static ") {
            out.push(format!("{path}: uses a global (`{}`)", l.trim()));
        }
    }
    out
}

/// Rule: only `os/git.rs` spawns git.
fn git_only_in_git_rs(path: &str, src: &str) -> Vec<String> {
    if path == "os/git.rs" {
        return vec![];
    }
    let c = code(src).replace(char::is_whitespace, "");
    if c.contains("Command::new(\"git\")") { vec![format!("{path}: spawns git (only git.rs may)")] } else { vec![] }
}

/// Rule: the CLI library stays in the CLI: no `clap` outside `cli/` and `main.rs` (the CLI maps
/// its arguments onto the state types).
fn clap_only_in_cli(path: &str, src: &str) -> Vec<String> {
    if top_module(path) == "cli" || path == "main.rs" {
        return vec![];
    }
    if code(src).contains("clap::") { vec![format!("{path}: uses clap (only cli/ may)")] } else { vec![] }
}

/// Rule: the API reaches a supervisor only through the control protocol (`crate::control`, over
/// the supervisor's socket): nothing of `crate::supervisor` is used in `api/`.
fn api_reaches_the_supervisor_by_its_socket(path: &str, src: &str) -> Vec<String> {
    if !path.starts_with("api/") {
        return vec![];
    }
    let c = code(src);
    let mut out = Vec::new();
    for (i, _) in c.match_indices("crate::supervisor") {
        let rest = &c[i + "crate::supervisor".len()..];
        let what: String =
            rest.trim_start_matches("::").chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        out.push(format!(
            "{path}: uses `crate::supervisor::{what}`; the API reaches a supervisor only through `crate::control`"
        ));
    }
    out
}

/// Rule: the folders are layers. `os/` (the OS and git) knows no run state, no view and no front
/// end; `state/` (what is on disk about runs) knows no protocol and no front end; `control/` (the
/// protocol) knows no front end; `views` (the API's JSON as types, which `state/` builds the
/// Overview's rows with) builds on the ids and the wire names alone.
fn layers(path: &str, src: &str) -> Vec<String> {
    if top_module(path) == "views" {
        return crate_deps(src)
            .into_iter()
            .filter(|d| !["ids", "wire"].contains(&d.as_str()))
            .map(|d| format!("{path}: imports `crate::{d}`; the views build on `ids` and `wire` alone"))
            .collect();
    }
    let above: &[&str] = match top_module(path).as_str() {
        "os" => &["state", "views", "control", "api", "supervisor", "cli", "runner", "demo", "approval_mcp"],
        "state" => &["control", "api", "supervisor", "cli", "runner", "demo", "approval_mcp"],
        "control" => &["api", "supervisor", "cli", "runner", "demo", "approval_mcp"],
        _ => return vec![],
    };
    crate_deps(src)
        .into_iter()
        .filter(|d| above.contains(&d.as_str()))
        .map(|d| format!("{path}: imports `crate::{d}`, a layer above `{}/`", top_module(path)))
        .collect()
}

/// Rule: the API never writes a journal itself; its ways to append are the DynWF inbox
/// (`inbox::append`) and the record of a refusal (`audit::refused`), both outside `api/`.
fn api_writes_no_journal(path: &str, src: &str) -> Vec<String> {
    if !path.starts_with("api/") {
        return vec![];
    }
    let c = code(src);
    ["Journal::open", "append_checked", ".append(&", "journal::Journal", "inbox::take"]
        .iter()
        .filter(|p| c.contains(*p))
        .map(|p| {
            format!("{path}: writes a journal (`{p}`); the API appends only through inbox::append and audit::refused")
        })
        .collect()
}

type Rule = fn(&str, &str) -> Vec<String>;
const RULES: &[(&str, Rule)] = &[
    ("header", header),
    ("no_cli_import", no_cli_import),
    ("pure", pure),
    ("git_only_in_git_rs", git_only_in_git_rs),
    ("api_writes_no_journal", api_writes_no_journal),
    ("engine_knowledge_in_engine", engine_knowledge_in_engine),
    ("layers", layers),
    ("clap_only_in_cli", clap_only_in_cli),
    ("api_reaches_the_supervisor_by_its_socket", api_reaches_the_supervisor_by_its_socket),
];

/// Rule: what an engine can do is asked of `Adapter` (`src/engine/`), never read off its variant
/// elsewhere: no `== Adapter::X`, `!= Adapter::X` or `Adapter::X =>` outside `engine/` (naming a
/// variant as a value, in a test or a table, is fine).
fn engine_knowledge_in_engine(path: &str, src: &str) -> Vec<String> {
    if path.starts_with("engine/") {
        return vec![];
    }
    let c = code(src);
    let c = c.split("#[cfg(test)]").next().unwrap_or("");
    let squeezed: String = c.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    for pat in ["== Adapter::", "!= Adapter::", "==crate::engine::Adapter::", "== crate::engine::Adapter::"] {
        if squeezed.contains(pat) {
            out.push(format!("{path}: compares an engine (`{pat}`): ask an `Adapter` capability"));
        }
    }
    let mut rest = squeezed.as_str();
    while let Some(i) = rest.find("Adapter::") {
        rest = &rest[i + "Adapter::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
        if rest[name.len()..].trim_start().starts_with("=>") || rest[name.len()..].trim_start().starts_with('|') {
            out.push(format!("{path}: matches on `Adapter::{name}`: the engine's knowledge belongs in `src/engine/`"));
        }
    }
    out
}

/// Cycles among top-level modules (Tarjan's strongly connected components of size > 1).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        idx: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.idx.len();
        t.idx.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let Some((w, _)) = t.g.get_key_value(w.as_str()) else { continue };
            if !t.idx.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w.as_str()) {
                let iw = t.idx[w.as_str()];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.idx[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                c.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t =
        T { g: graph, idx: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    for v in graph.keys() {
        if !t.idx.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn module_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, src) in files {
        let m = top_module(path);
        if m == "lib" || m == "main" {
            continue;
        }
        let deps: Vec<String> = crate_deps(src).into_iter().filter(|d| *d != m).collect();
        g.entry(m).or_default().extend(deps);
    }
    g
}

/// Functions longer than `max` lines in rustfmt'd `src` (from the `fn` line to the `}` at its
/// indentation), as (name, lines).
fn long_functions(src: &str, max: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let mut rest = t;
        for prefix in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let Some(sig) = rest.strip_prefix("fn ") else { continue };
        if l.trim_end().ends_with(';') {
            continue;
        }
        let name: String = sig.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let close = format!("{indent}}}");
        if let Some(end) = lines[i + 1..].iter().position(|x| *x == close) {
            let n = end + 2;
            if n > max {
                out.push((name, n));
            }
        }
    }
    out
}

/// The functions allowed over 100 lines, each with why: flat tables, where a split would only hide
/// the table.
const LONG_ALLOWED: &[(&str, &str, &str)] = &[];

#[test]
fn no_function_is_over_100_lines_but_the_allowed_tables() {
    let mut found = Vec::new();
    for (path, src) in sources() {
        for (name, n) in long_functions(&src, 100) {
            found.push((path.clone(), name, n));
        }
    }
    let allowed = |p: &str, f: &str| LONG_ALLOWED.iter().any(|(ap, af, _)| *ap == p && *af == f);
    let over: Vec<String> =
        found.iter().filter(|(p, f, _)| !allowed(p, f)).map(|(p, f, n)| format!("{p}: fn {f} is {n} lines")).collect();
    assert!(
        over.is_empty(),
        "functions over 100 lines (split them, or allow a flat table with why):\n  {}",
        over.join("\n  ")
    );
    let stale: Vec<&str> = LONG_ALLOWED
        .iter()
        .filter(|(p, f, _)| !found.iter().any(|(fp, ff, _)| fp == p && ff == f))
        .map(|(p, _, _)| *p)
        .collect();
    assert!(stale.is_empty(), "allowed long functions that are no longer long (drop them): {stale:?}");
}

#[test]
fn the_length_rule_measures_what_it_says() {
    let body = |n: usize| format!("    fn f() {{\n{}    }}\n", "        x();\n".repeat(n - 2));
    assert_eq!(long_functions(&body(101), 100), vec![("f".to_string(), 101)]);
    assert!(long_functions(&body(100), 100).is_empty());
    assert!(long_functions("pub fn g();\n", 0).is_empty());
    assert_eq!(long_functions("pub async fn h() {\n}\n", 1), vec![("h".to_string(), 2)]);
}

#[test]
fn src_keeps_the_architecture_invariants() {
    let files = sources();
    assert!(files.len() > 30, "tidy found only {} files under src/", files.len());
    let mut problems = Vec::new();
    for (path, src) in &files {
        for (_, rule) in RULES {
            problems.extend(rule(path, src));
        }
    }
    for c in cycles(&module_graph(&files)) {
        problems.push(format!("import cycle among top-level modules: {}", c.join(" <-> ")));
    }
    assert!(problems.is_empty(), "tidy found:\n  {}", problems.join("\n  "));
}

#[test]
fn each_rule_catches_what_it_is_for() {
    let hits = |rule: Rule, path: &str, src: &str| !rule(path, src).is_empty();
    assert!(hits(header, "x.rs", "use std::fs;\n"));
    assert!(!hits(header, "x.rs", "//! What x is.\n"));
    assert!(hits(no_cli_import, "supervisor/mod.rs", "//! s\nuse crate::cli::CliError;\n"));
    assert!(hits(no_cli_import, "api/mod.rs", "//! a\nuse crate::{cli, home};\n"));
    assert!(!hits(no_cli_import, "cli/remote.rs", "//! r\nuse crate::cli::CliError;\n"));
    assert!(!hits(no_cli_import, "api/mod.rs", "//! a\n// see crate::cli for the flags\n"));
    assert!(hits(api_reaches_the_supervisor_by_its_socket, "api/verbs.rs", "crate::supervisor::Options::default()"));
    assert!(hits(api_reaches_the_supervisor_by_its_socket, "api/verbs.rs", "use crate::supervisor::socket;"));
    assert!(!hits(api_reaches_the_supervisor_by_its_socket, "api/verbs.rs", "use crate::control::{self, Request};"));
    assert!(hits(clap_only_in_cli, "state/registry.rs", "#[derive(Serialize, clap::ValueEnum)]"));
    assert!(!hits(clap_only_in_cli, "cli/mod.rs", "#[derive(clap::ValueEnum)]"));
    assert!(hits(layers, "os/worktree.rs", "use crate::state::journal::Journal;"));
    assert!(hits(layers, "state/plan.rs", "let x = crate::supervisor::Options::default();"));
    assert!(!hits(layers, "state/prune.rs", "use crate::os::worktree;"));
    assert!(hits(layers, "control/mod.rs", "use crate::supervisor::Scheduler;"));
    assert!(hits(layers, "state/inbox.rs", "use crate::control::Name;"));
    assert!(hits(layers, "os/home.rs", "use crate::views::RunRow;"));
    assert!(hits(layers, "views.rs", "use crate::state::journal::RunStatus;"));
    assert!(!hits(layers, "views.rs", "use crate::ids::{RunId, TaskId};"));
    assert!(!hits(layers, "state/summary.rs", "use crate::views;"));
    assert!(hits(pure, "views.rs", "let f = std::fs::read(p);"));
    assert!(hits(pure, "engine/claude/normalize.rs", "let t = std::time::SystemTime::now();"));
    assert!(hits(pure, "events.rs", "static COUNTER: u64 = 0;"));
    assert!(hits(pure, "engine/normalize.rs", "let f = std::fs::read(p);"));
    assert!(!hits(pure, "os/tail.rs", "let f = std::fs::read(p);"));
    assert!(hits(git_only_in_git_rs, "supervisor/pipeline.rs", "Command::new( \"git\" ).arg(\"add\")"));
    assert!(!hits(git_only_in_git_rs, "os/git.rs", "Command::new(\"git\")"));
    assert!(hits(api_writes_no_journal, "api/verbs.rs", "let j = Journal::open(&p)?; j.append(&rec)?;"));
    assert!(!hits(api_writes_no_journal, "api/verbs.rs", "crate::state::inbox::append(&pointer, verb)"));
    assert!(hits(engine_knowledge_in_engine, "plan.rs", "if t.adapter == Adapter::Claude {"));
    assert!(hits(engine_knowledge_in_engine, "api/x.rs", "match a { Adapter::Codex => 1, _ => 2 }"));
    assert!(!hits(engine_knowledge_in_engine, "engine/mod.rs", "match self { Adapter::Codex => 1 }"));
    assert!(!hits(engine_knowledge_in_engine, "plan.rs", "if t.adapter.has_live_channel() {"));
    assert!(hits(pure, "engine/claude/normalize.rs", "let f = std::fs::read(p);"));
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
}
