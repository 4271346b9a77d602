//! Fuzz target: arbitrary bytes through the codex normalizer, line by line. Checks that nothing panics,
//! every event's seq is its line, and every event serializes to JSON that parses back.
#![no_main]

use harness::engine::Adapter;
use harness::engine::normalize::{Context, normalize_line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ctx = Context { run: "0123456789ab--fuzz", task: "T1", session: None, observed_ts: "2026-11-30T12:00:00.000Z" };
    for (i, line) in data.split_inclusive(|&b| b == b'\n').enumerate() {
        let n = i as u64 + 1;
        for e in normalize_line(Adapter::Codex, n, line, &ctx) {
            assert_eq!(e.seq.line, n);
            let s = e.to_json();
            let v: serde_json::Value = serde_json::from_str(&s).expect("event is JSON");
            assert!(v.is_object());
        }
    }
});
