//! What a person types for a run: its full runId, a slug, or a unique prefix of the runId — an
//! exact slug first, then the newest run of the plan whose slug it is (`base_slug`), then a runId
//! prefix; runs of the current repository preferred. An ambiguous reference is a usage error listing the candidates.

use super::error::{CliError, usage};
use super::local::home;
use crate::ids::RunId;
use crate::state::registry::{self, Pointer};

/// The run `reference` names.
pub(super) fn resolve(reference: &str) -> Result<RunId, CliError> {
    let home = home()?;
    // A full id (of a run of this home, or of another API's: it is passed on as it is).
    let full = RunId::parse(reference).ok();
    if let Some(id) = &full
        && registry::read(&home, id).is_ok()
    {
        return Ok(id.clone());
    }
    if reference.is_empty() {
        return Err(usage("a run is named by its runId, a prefix of it, or its slug"));
    }
    let (pointers, _) = registry::enumerate(&home).map_err(|e| CliError::Failed(e.to_string()))?;
    let here = std::env::current_dir().ok().and_then(|d| crate::os::git::toplevel(&d));
    let here = here.and_then(|d| std::fs::canonicalize(d).ok());
    match (pick(reference, &pointers, here.as_deref()), full) {
        (Err(CliError::Usage(_)), Some(id)) => Ok(id),
        (r, _) => r,
    }
}

fn pick(reference: &str, all: &[Pointer], here: Option<&std::path::Path>) -> Result<RunId, CliError> {
    // Among several, the current repository's; then exactly one, else ambiguous.
    let choose = |found: Vec<&Pointer>, what: &str| -> Option<Result<RunId, CliError>> {
        if found.is_empty() {
            return None;
        }
        let local: Vec<&Pointer> = found.iter().copied().filter(|p| Some(p.repo_root.as_path()) == here).collect();
        let set = if local.is_empty() { found } else { local };
        Some(match set.as_slice() {
            [one] => Ok(one.run_id.clone()),
            many => Err(ambiguous(reference, what, many)),
        })
    };
    let slug: Vec<&Pointer> = all.iter().filter(|p| p.slug.as_str() == reference).collect();
    if let Some(r) = choose(slug, "slug") {
        // The slug names that run; when the plan ran again there, say which run is the newest
        // (`harness pause p4` after a re-run means p4 itself, which may be over).
        if let Ok(id) = &r
            && let Some(named) = all.iter().find(|p| &p.run_id == id)
            && let Some(newer) = all
                .iter()
                .filter(|p| p.plan_slug() == named.plan_slug() && p.worktree == named.worktree)
                .filter(|p| p.created > named.created)
                .max_by(|a, b| a.created.cmp(&b.created))
        {
            eprintln!(
                "harness: {reference:?} names run {id} (its own slug); the plan ran again here since: its newest run is {} (name it `{}`)",
                newer.run_id, newer.slug
            );
        }
        return r;
    }
    // A plan's runs: the newest of each repository's, then the current repository's.
    let mut plan: Vec<&Pointer> = all.iter().filter(|p| p.plan_slug().as_str() == reference).collect();
    plan.sort_by(|a, b| b.created.cmp(&a.created));
    let mut newest: Vec<&Pointer> = Vec::new();
    for p in plan {
        if !newest.iter().any(|n| n.repo_root == p.repo_root && n.worktree == p.worktree) {
            newest.push(p);
        }
    }
    if let Some(r) = choose(newest, "plan") {
        return r;
    }
    // After the slugs: a plan named `cafe` or `add` is not taken for a runId prefix.
    let prefix: Vec<&Pointer> = all.iter().filter(|p| p.run_id.as_str().starts_with(reference)).collect();
    if let Some(r) = choose(prefix, "runId prefix") {
        return r;
    }
    Err(usage(format!(
        "no run matches {reference:?}: name a run by its runId, a unique prefix of it, or its slug (`harness runs` lists them)"
    )))
}

fn ambiguous(reference: &str, what: &str, many: &[&Pointer]) -> CliError {
    let list: Vec<String> = many.iter().map(|p| format!("  {} ({})", p.run_id, p.repo_root.display())).collect();
    usage(format!("{reference:?} names more than one run (by {what}); say which:\n{}", list.join("\n")))
}
