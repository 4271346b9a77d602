//! Honest statuses for verbs: a verb delivered to a supervisor that gives no answer within its budget
//! is a 504 that says it may have acted (it used to be a 409 "not live"); a refused connection stays
//! 409.

use crate::common::*;
use std::time::{Duration, Instant};

#[test]
fn a_verb_the_supervisor_does_not_answer_in_time_is_504_and_may_have_acted() {
    let b = Bench::new();
    let plan = r#"{"v":"plan/v1","slug":"mute","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"a"}]}"#;
    let sup = b.start_supervised(plan, "hang", &[]);
    b.wait_state("A", "leased", Duration::from_secs(30));
    let api = ApiProc::start(&b.home(), &[]);
    let pid = sup.child.id() as i32;
    // A stopped supervisor: the connection is accepted (the kernel queues it), no answer comes.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let post = |verb: &str| {
        let json = [("Content-Type", "application/json")];
        http(api.port, "POST", &format!("/runs/{}/{verb}", b.run_id()), &json, Some(b"{}"))
    };
    let t = Instant::now();
    let r = post("pause");
    let took = t.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(r.status, 504, "{}", r.text());
    let detail = r.json()["detail"].as_str().unwrap().to_string();
    assert_eq!(
        detail,
        format!("no answer from the supervisor within 10 s; it may have acted — see GET /runs/{}", b.run_id())
    );
    assert!(took >= Duration::from_secs(10) && took < Duration::from_secs(20), "{took:?}");
    // It did act once it ran again: the pause is on the record.
    wait_for(Duration::from_secs(10), || (b.view()["status"] == "paused").then_some(()))
        .expect("the delivered pause was applied after SIGCONT");
    // The supervisor gone (its socket file left behind): nobody listening is still 409 "not live".
    drop(sup);
    let r = post("resume");
    assert_eq!(r.status, 409, "{}", r.text());
}
