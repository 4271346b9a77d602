//! What a task's turns used and cost, from its log alone: a pure, incremental fold over the log's
//! complete lines (the engines' result lines and our exit markers). Decides nothing.
//!
//! Which engine field feeds each number is each engine's own (`claude/usage.rs`, `codex/usage.rs`,
//! `cursor/usage.rs`; `spec/USAGE.md`): claude prices its turns, codex reports tokens only, cursor
//! neither. This module holds what they share: the line filter, the counts and the `Usage` view.
//!
//! A turn killed before its result line reports nothing; it is not counted.

use crate::engine::Adapter;
use serde::Serialize;
use serde_json::Value;

/// A task's (or a run's) usage, as the views show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// US dollars as the engine priced them; null where the engine reports no price.
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// Turns that reported (result lines).
    pub turns: u64,
    /// `engine` (priced by the engine), `tokens only`, `not reported`, or `mixed` (a run whose tasks
    /// differ).
    pub cost: &'static str,
}

/// Read back (a run's kept usage once its logs are pruned): `cost` is one of the four words.
impl<'de> serde::Deserialize<'de> for Usage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Wire {
            cost_usd: Option<f64>,
            input_tokens: Option<u64>,
            output_tokens: Option<u64>,
            cache_read_tokens: Option<u64>,
            cache_write_tokens: Option<u64>,
            turns: u64,
            cost: String,
        }
        let w = Wire::deserialize(d)?;
        let cost = ["engine", "tokens only", "not reported", "mixed"]
            .into_iter()
            .find(|c| *c == w.cost)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown cost kind {:?}", w.cost)))?;
        Ok(Usage {
            cost_usd: w.cost_usd,
            input_tokens: w.input_tokens,
            output_tokens: w.output_tokens,
            cache_read_tokens: w.cache_read_tokens,
            cache_write_tokens: w.cache_write_tokens,
            turns: w.turns,
            cost,
        })
    }
}

impl Usage {
    /// A run's usage: the sum of its tasks'. A price or token figure some task lacks is left out of
    /// the sum, and `cost` says `mixed`.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Usage>) -> Usage {
        let mut out = Usage { cost: "not reported", ..Usage::default() };
        let mut first = true;
        for u in all {
            out.turns = out.turns.saturating_add(u.turns);
            if u.turns == 0 && u.cost_usd.is_none() {
                continue; // a task that never reported says nothing about the run's kind of cost
            }
            out.cost = if first || out.cost == u.cost { u.cost } else { "mixed" };
            first = false;
            out.cost_usd = add_f(out.cost_usd, u.cost_usd);
            out.input_tokens = add(out.input_tokens, u.input_tokens);
            out.output_tokens = add(out.output_tokens, u.output_tokens);
            out.cache_read_tokens = add(out.cache_read_tokens, u.cache_read_tokens);
            out.cache_write_tokens = add(out.cache_write_tokens, u.cache_write_tokens);
        }
        out
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        // An engine's figures are not trusted to fit: saturated, never a panic or a wrap.
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

fn add_f(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// What every engine's turns add up to: turns, and tokens where the engine reports them
/// (input, output, cache read, cache write).
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    pub turns: u64,
    tokens: [u64; 4],
    any_tokens: bool,
}

impl Counts {
    /// Adds one turn's tokens; `reported`: the line carried a usage object at all.
    pub(crate) fn add(&mut self, own: [u64; 4], reported: bool) {
        for (t, o) in self.tokens.iter_mut().zip(own) {
            *t = t.saturating_add(o);
        }
        self.any_tokens |= reported;
    }

    fn tokens(&self, i: usize) -> Option<u64> {
        self.any_tokens.then_some(self.tokens[i])
    }
}

/// Each engine's own fold (in its submodule).
#[derive(Debug, Clone)]
enum Fold {
    Claude(super::claude::usage::Fold),
    Codex,
    Cursor,
}

/// The incremental fold: feed it the log's bytes as they grow; `usage()` at any point.
#[derive(Debug, Clone)]
pub struct Tally {
    fold: Fold,
    /// Bytes of the log consumed (complete lines only).
    pub offset: u64,
    counts: Counts,
}

impl Tally {
    pub fn new(adapter: Adapter) -> Tally {
        let fold = match adapter {
            Adapter::Claude => Fold::Claude(Default::default()),
            Adapter::Codex => Fold::Codex,
            Adapter::Cursor => Fold::Cursor,
        };
        Tally { fold, offset: 0, counts: Counts::default() }
    }

    /// Consumes the complete lines of `buf` (the log from `self.offset` on); a last line without its
    /// newline is left for the next call.
    pub fn feed(&mut self, buf: &[u8]) {
        let Some(end) = memchr::memrchr(b'\n', buf) else { return };
        for line in buf[..end].split(|b| *b == b'\n') {
            self.line(line);
        }
        self.offset += end as u64 + 1;
    }

    /// Consumes one complete line (without its newline); the caller moves `offset` past it.
    pub fn line(&mut self, line: &[u8]) {
        if line.starts_with(b"{\"harness\":\"exit\"") {
            if let Fold::Claude(f) = &mut self.fold {
                f.process_ended();
            }
            return;
        }
        let needle = match self.fold {
            Fold::Claude(_) => super::claude::usage::NEEDLE,
            Fold::Codex => super::codex::usage::NEEDLE,
            Fold::Cursor => super::cursor::usage::NEEDLE,
        };
        // Most lines are deltas: only a line of the kind that carries numbers is parsed.
        if memchr::memmem::find(line, needle.as_bytes()).is_none() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line) else { return };
        let c = &mut self.counts;
        match &mut self.fold {
            Fold::Claude(f) => f.line(&v, c),
            Fold::Codex => super::codex::usage::line(&v, c),
            Fold::Cursor => super::cursor::usage::line(&v, c),
        }
    }

    pub fn usage(&self) -> Usage {
        let c = &self.counts;
        let (cost_usd, cost) = match &self.fold {
            Fold::Claude(f) => (f.cost_usd(c), "engine"),
            Fold::Codex => (None, "tokens only"),
            Fold::Cursor => (None, "not reported"),
        };
        Usage {
            cost_usd: cost_usd.map(|c| (c * 1e6).round() / 1e6),
            input_tokens: c.tokens(0),
            output_tokens: c.tokens(1),
            cache_read_tokens: c.tokens(2),
            cache_write_tokens: c.tokens(3),
            turns: c.turns,
            cost,
        }
    }
}

pub(crate) fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A whole log's usage.
pub fn of_log(adapter: Adapter, bytes: &[u8]) -> Usage {
    let mut t = Tally::new(adapter);
    t.feed(bytes);
    t.usage()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(session: &str, total: f64, own: (u64, u64), model: (u64, u64)) -> String {
        serde_json::json!({"type":"result","session_id":session,"total_cost_usd":total,
            "usage":{"input_tokens":own.0,"output_tokens":own.1,"cache_read_input_tokens":0,"cache_creation_input_tokens":0},
            "modelUsage":{"m":{"inputTokens":model.0,"outputTokens":model.1}}})
        .to_string()
    }

    #[test]
    fn a_resumed_process_that_carries_the_session_total_is_not_counted_twice() {
        // As the real CLI printed it: turn 1 (100/9, $0.00058), exit, a resumed turn of 200/18 whose
        // totals hold both processes ($0.00174).
        let log = [
            result("s", 0.00058, (100, 9), (100, 9)),
            "{\"harness\":\"exit\",\"rc\":0}".into(),
            result("s", 0.00174, (200, 18), (300, 27)),
            "{\"harness\":\"exit\",\"rc\":0}".into(),
        ]
        .join("\n")
            + "\n";
        let u = of_log(Adapter::Claude, log.as_bytes());
        assert_eq!(u.cost_usd, Some(0.00174));
        assert_eq!((u.input_tokens, u.output_tokens, u.turns), (Some(300), Some(27), 2));
        assert_eq!(u.cost, "engine");
    }

    #[test]
    fn a_process_that_starts_from_zero_adds_its_total() {
        let log = [
            result("s", 0.5, (100, 9), (100, 9)),
            "{\"harness\":\"exit\",\"rc\":0}".into(),
            result("s", 0.25, (50, 5), (50, 5)),
        ]
        .join("\n")
            + "\n";
        assert_eq!(of_log(Adapter::Claude, log.as_bytes()).cost_usd, Some(0.75));
        // Live channel: turns of one process run the totals on.
        let live =
            [result("s", 0.00138, (260, 17), (260, 17)), result("s", 0.00308, (340, 17), (600, 34))].join("\n") + "\n";
        let u = of_log(Adapter::Claude, live.as_bytes());
        assert_eq!((u.cost_usd, u.input_tokens, u.turns), (Some(0.00308), Some(600), 2));
        // Another session (a fresh one after the first could not be resumed) adds up.
        let two = [result("a", 1.0, (1, 1), (1, 1)), result("b", 2.0, (1, 1), (1, 1))].join("\n") + "\n";
        assert_eq!(of_log(Adapter::Claude, two.as_bytes()).cost_usd, Some(3.0));
    }

    #[test]
    fn fed_in_pieces_it_counts_each_line_once_and_waits_for_a_whole_line() {
        let log = result("s", 0.1, (10, 1), (10, 1)) + "\n" + &result("s", 0.3, (20, 2), (30, 3)) + "\n";
        let mut t = Tally::new(Adapter::Claude);
        let cut = log.len() - 7;
        t.feed(&log.as_bytes()[..cut]);
        assert_eq!(t.usage().turns, 1);
        t.feed(&log.as_bytes()[t.offset as usize..]);
        assert_eq!(t.usage(), of_log(Adapter::Claude, log.as_bytes()));
        assert_eq!(t.offset as usize, log.len());
    }

    #[test]
    fn codex_counts_tokens_without_a_price_and_cursor_reports_neither() {
        let codex = include_bytes!("../../fixtures/streams/codex/basic.jsonl");
        let u = of_log(Adapter::Codex, codex);
        assert_eq!((u.cost_usd, u.cost), (None, "tokens only"));
        assert!(u.turns >= 1 && u.input_tokens.unwrap() > 0, "{u:?}");
        let cursor = include_bytes!("../../fixtures/streams/cursor/direct-sleep.jsonl");
        let u = of_log(Adapter::Cursor, cursor);
        assert_eq!((u.cost_usd, u.input_tokens, u.turns, u.cost), (None, None, 1, "not reported"));
        let run = Usage::sum([&of_log(Adapter::Codex, codex), &u]);
        assert_eq!(run.cost, "mixed");
    }
}
