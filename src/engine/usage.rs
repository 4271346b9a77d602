//! What a task's turns used and cost, from its log alone: a pure, incremental fold over the log's
//! complete lines (the engines' result lines and our exit markers). Decides nothing.
//!
//! Which engine field feeds each number (`spec/USAGE.md`):
//! - **claude**: each `result` line is one turn. Its `usage` holds that turn's own tokens (summed over
//!   the turn's model requests); its `total_cost_usd` (and `modelUsage`) are **cumulative over the
//!   session**: across the turns of one process and — as measured with 2.1.332 — across `--resume`
//!   processes of the same session, which restore it. So tokens are the sum of the turns' `usage`; the
//!   cost is the session's last `total_cost_usd`, except that a process which did not carry the
//!   session's total on (its first result's `modelUsage` tokens are below the session's so far plus
//!   its own turn) adds its total instead.
//! - **codex**: each `turn.completed` carries that turn's `usage`; no price: `cost_usd` is null and
//!   `cost` says `tokens only`.
//! - **cursor**: its `result` line carries neither tokens nor a price: tokens and cost are null
//!   (`cost: not reported`), turns are counted.
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
            out.turns += u.turns;
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
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

fn add_f(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// The incremental fold: feed it the log's bytes as they grow; `usage()` at any point.
#[derive(Debug, Clone)]
pub struct Tally {
    adapter: Adapter,
    /// Bytes of the log consumed (complete lines only).
    pub offset: u64,
    turns: u64,
    tokens: [u64; 4],
    any_tokens: bool,
    /// Cost of the sessions closed before the current one, and the current one's total so far.
    cost_done: f64,
    session: Option<String>,
    session_cost: f64,
    session_tokens: u64,
    /// The current process has printed a result already (a later one continues its totals).
    process_reported: bool,
    priced: bool,
}

impl Tally {
    pub fn new(adapter: Adapter) -> Tally {
        Tally {
            adapter,
            offset: 0,
            turns: 0,
            tokens: [0; 4],
            any_tokens: false,
            cost_done: 0.0,
            session: None,
            session_cost: 0.0,
            session_tokens: 0,
            process_reported: false,
            priced: false,
        }
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

    fn line(&mut self, line: &[u8]) {
        let finder = |needle: &str| memchr::memmem::find(line, needle.as_bytes()).is_some();
        if line.starts_with(b"{\"harness\":\"exit\"") {
            self.process_reported = false; // the next result is a new process's
            return;
        }
        let interesting = match self.adapter {
            Adapter::Claude | Adapter::Cursor => finder("\"type\":\"result\""),
            Adapter::Codex => finder("\"type\":\"turn.completed\""),
        };
        if !interesting {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line) else { return };
        match self.adapter {
            Adapter::Claude if v["type"] == "result" => self.claude_result(&v),
            Adapter::Cursor if v["type"] == "result" => self.turns += 1,
            Adapter::Codex if v["type"] == "turn.completed" => {
                self.turns += 1;
                let u = &v["usage"];
                self.tokens[0] += n(&u["input_tokens"]);
                self.tokens[1] += n(&u["output_tokens"]);
                self.tokens[2] += n(&u["cached_input_tokens"]);
                self.tokens[3] += n(&u["cache_write_input_tokens"]);
                self.any_tokens |= u.is_object();
            }
            _ => {}
        }
    }

    fn claude_result(&mut self, v: &Value) {
        self.turns += 1;
        let u = &v["usage"];
        let own = [
            n(&u["input_tokens"]),
            n(&u["output_tokens"]),
            n(&u["cache_read_input_tokens"]),
            n(&u["cache_creation_input_tokens"]),
        ];
        for (t, o) in self.tokens.iter_mut().zip(own) {
            *t += o;
        }
        self.any_tokens |= u.is_object();
        let Some(total) = v["total_cost_usd"].as_f64() else { return };
        self.priced = true;
        let session = v["session_id"].as_str().map(str::to_string);
        if session != self.session {
            self.cost_done += self.session_cost;
            self.session = session;
            self.session_cost = 0.0;
            self.session_tokens = 0;
            self.process_reported = false;
        }
        let model_tokens: u64 = v["modelUsage"].as_object().map_or(0, |m| {
            m.values()
                .map(|x| {
                    n(&x["inputTokens"])
                        + n(&x["outputTokens"])
                        + n(&x["cacheReadInputTokens"])
                        + n(&x["cacheCreationInputTokens"])
                })
                .sum()
        });
        let own_tokens: u64 = own.iter().sum();
        // Within a process the totals run on; a new process either carried the session's totals on
        // (its model tokens hold everything so far plus its turn) or started from zero.
        let carried = self.process_reported || model_tokens >= self.session_tokens + own_tokens;
        if carried {
            self.session_cost = total;
            self.session_tokens = model_tokens;
        } else {
            self.cost_done += self.session_cost;
            self.session_cost = total;
            self.session_tokens = model_tokens;
        }
        self.process_reported = true;
    }

    pub fn usage(&self) -> Usage {
        let tokens = |i: usize| self.any_tokens.then_some(self.tokens[i]);
        let (cost_usd, cost) = match self.adapter {
            Adapter::Claude => (Some(self.cost_done + self.session_cost), "engine"),
            Adapter::Codex => (None, "tokens only"),
            Adapter::Cursor => (None, "not reported"),
        };
        Usage {
            cost_usd: cost_usd.map(|c| (c * 1e6).round() / 1e6).filter(|_| self.priced || self.turns == 0),
            input_tokens: tokens(0),
            output_tokens: tokens(1),
            cache_read_tokens: tokens(2),
            cache_write_tokens: tokens(3),
            turns: self.turns,
            cost,
        }
    }
}

fn n(v: &Value) -> u64 {
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
