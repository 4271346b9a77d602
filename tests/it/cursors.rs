//! Cursor ergonomics a new client expects: `after=0` and `Last-Event-ID: 0` mean "from the
//! beginning", and a `limit` above the largest page is served as the largest page and says so.

use crate::common::*;

#[test]
fn after_zero_is_the_beginning_and_a_large_limit_is_clamped_and_said() {
    let home = tempfile::tempdir().unwrap();
    let ids = install_fixture_runs(home.path());
    let run = run_id_of(&ids, "finished");
    let api = ApiProc::start(home.path(), &[]);
    let page = |q: &str| api.get(&format!("/runs/{run}/tasks/T1/events{q}"));
    // The seqs of a page (lines without their own time carry the time they were read).
    let seqs = |r: &Resp| -> Vec<String> {
        r.text().lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"].to_string()).collect()
    };
    let all = page("");
    assert_eq!(all.status, 200, "{}", all.text());
    assert!(seqs(&all).len() > 5);
    for q in ["?after=0", "?after=", "?after=0&limit=500"] {
        let r = page(q);
        assert_eq!((r.status, seqs(&r)), (200, seqs(&all)), "{q}");
    }
    // Above the largest page: the largest page, and the header says what was served.
    let r = page("?limit=99999");
    assert_eq!((r.status, seqs(&r)), (200, seqs(&all)));
    assert_eq!(r.header("harness-limit"), Some("5000"));
    let r = page("?limit=123456789012345678901234567890");
    assert_eq!((r.status, r.header("harness-limit")), (200, Some("5000")));
    assert_eq!(page("?limit=20").header("harness-limit"), None, "no header when nothing was clamped");
    for bad in ["?limit=0", "?limit=-1", "?limit=ten", "?after=-3", "?after=1.0"] {
        assert_eq!(page(bad).status, 400, "{bad}");
    }
    // Last-Event-ID: 0 parses as the beginning (the run is not live: 409, not a 400).
    let r = http(api.port, "GET", &format!("/runs/{run}/tasks/T1/stream"), &[("Last-Event-ID", "0")], None);
    assert_eq!(r.status, 409, "{}", r.text());
    let r = http(api.port, "GET", &format!("/runs/{run}/tasks/T1/stream?lastEventId=0"), &[], None);
    assert_eq!(r.status, 409, "{}", r.text());
}
