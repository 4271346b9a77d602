//! cursor-agent's spend: its `result` line carries neither tokens nor a price; turns are counted.

use crate::engine::usage::Counts;
use serde_json::Value;

/// The line kind that marks a turn.
pub(crate) const NEEDLE: &str = "\"type\":\"result\"";

pub(crate) fn line(v: &Value, c: &mut Counts) {
    if v["type"] == "result" {
        c.turns += 1;
    }
}
