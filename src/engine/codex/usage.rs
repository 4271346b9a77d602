//! codex's spend: each `turn.completed` carries that turn's `usage`; codex prints no price.

use crate::engine::usage::{Counts, n};
use serde_json::Value;

/// The line kind that carries a turn's numbers.
pub(crate) const NEEDLE: &str = "\"type\":\"turn.completed\"";

pub(crate) fn line(v: &Value, c: &mut Counts) {
    if v["type"] != "turn.completed" {
        return;
    }
    c.turns += 1;
    let u = &v["usage"];
    let own = [
        n(&u["input_tokens"]),
        n(&u["output_tokens"]),
        n(&u["cached_input_tokens"]),
        n(&u["cache_write_input_tokens"]),
    ];
    c.add(own, u.is_object());
}
