//! claude's spend (`spec/USAGE.md`): each `result` line is one turn; its `usage` holds the turn's own
//! tokens, its `total_cost_usd` (and `modelUsage`) are cumulative over the session — across the turns
//! of one process and, as measured with 2.1.332, across `--resume` processes that restore it. So the
//! cost is the session's last total, except that a process which did not carry the session's total on
//! (its first result's `modelUsage` tokens are below the session's so far plus its own turn) adds its
//! total instead.

use crate::engine::usage::{Counts, n};
use serde_json::Value;

/// The line kind that carries a turn's numbers.
pub(crate) const NEEDLE: &str = "\"type\":\"result\"";

/// The session bookkeeping the cost needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fold {
    /// Cost of the sessions closed before the current one, and the current one's total so far.
    cost_done: f64,
    session: Option<String>,
    session_cost: f64,
    session_tokens: u64,
    /// The current process has printed a result already (a later one continues its totals).
    process_reported: bool,
    priced: bool,
}

impl Fold {
    /// A wrapper exit marker: the next result is a new process's.
    pub(crate) fn process_ended(&mut self) {
        self.process_reported = false;
    }

    pub(crate) fn line(&mut self, v: &Value, c: &mut Counts) {
        if v["type"] != "result" {
            return;
        }
        c.turns += 1;
        let u = &v["usage"];
        let own = [
            n(&u["input_tokens"]),
            n(&u["output_tokens"]),
            n(&u["cache_read_input_tokens"]),
            n(&u["cache_creation_input_tokens"]),
        ];
        c.add(own, u.is_object());
        // A cost that is not a finite, non-negative figure is not a price (a negative one would
        // keep a budget from ever being reached).
        let Some(total) = v["total_cost_usd"].as_f64().filter(|c| c.is_finite() && *c >= 0.0) else { return };
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
                        .saturating_add(n(&x["outputTokens"]))
                        .saturating_add(n(&x["cacheReadInputTokens"]))
                        .saturating_add(n(&x["cacheCreationInputTokens"]))
                })
                .fold(0u64, u64::saturating_add)
        });
        // Within a process the totals run on; a new process either carried the session's totals on
        // (its model tokens hold everything so far plus its turn) or started from zero.
        let carried =
            self.process_reported || model_tokens >= own.iter().fold(self.session_tokens, |a, b| a.saturating_add(*b));
        if !carried {
            self.cost_done += self.session_cost;
        }
        self.session_cost = total;
        self.session_tokens = model_tokens;
        self.process_reported = true;
    }

    /// The engine's price: the sessions' totals (nothing before a priced result, but a task with no
    /// turn yet costs 0).
    pub(crate) fn cost_usd(&self, c: &Counts) -> Option<f64> {
        Some(self.cost_done + self.session_cost).filter(|_| self.priced || c.turns == 0)
    }
}
