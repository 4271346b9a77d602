//! cursor-agent: its stream dialect (`normalize`); it reports no rate limit we can read.

pub(crate) mod normalize;
pub(crate) mod usage;

use super::ratelimit::Limited;

/// None: cursor-agent prints nothing that says a turn hit a rate limit.
pub(crate) fn rate_limit<'a>(_lines: impl Iterator<Item = &'a [u8]>) -> Option<Limited> {
    None
}

/// A failed `result` line's text.
pub(crate) fn last_error<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<String> {
    super::failure::failed_result(lines)
}
