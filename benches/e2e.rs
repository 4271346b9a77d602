//! End to end with the real Claude Code CLI (`cargo bench --bench e2e`; needs the pinned CLI that
//! `.ci/run` installs, or `HARNESS_CLAUDE_BIN`).
//!
//! 1. Live latency: the local model stand-in streams 50 text deltas 100 ms apart and logs when it sends
//!    each; an SSE client follows `/stream` of the task running the real claude through `na.sh` and the
//!    supervisor. Per delta: stand-in sent → SSE client received. Goal p50 ≤ 50 ms.
//! 2. Kill: the API's kill verb on a claude task mid-stream, 10 runs: request → acknowledged, and
//!    acknowledged → claude's process group gone (polled every 1 ms). Goal median ≤ 200 ms.

mod support;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::common::real::RealEnv;
use support::common::standin::StandIn;
use support::common::*;

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let s = StandIn::start();
    let b = Bench::new();
    let Some(env) = RealEnv::new(b.dir.path(), &s) else {
        eprintln!("e2e: the real claude CLI is not installed; run `bash .ci/run` once or set HARNESS_CLAUDE_BIN");
        std::process::exit(1);
    };
    let vars = env.vars();

    // 1. Live latency through the whole chain.
    let plan = r#"{"v":"plan/v1","slug":"latency","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"Stream. [anthropic:slow:50:100]"}]}"#;
    let mut sup = b.start_supervised_with(plan, "success", &[], &vars);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let mut c = SseConn::open(api.port, &format!("/runs/{run}/tasks/A/stream"), &[]);
    let mut received: Vec<(String, Instant)> = Vec::new();
    loop {
        let e = c.next_event().expect("the stream ended before its exit event");
        let at = Instant::now();
        let v: Value = serde_json::from_str(&e.data).unwrap();
        if v["type"] == "token_delta" && v["data"]["final"].is_null() {
            received.push((v["data"]["text"].as_str().unwrap().to_string(), at));
        }
        if v["type"] == "exit" {
            break;
        }
    }
    let sent = s.sent();
    let mut lat: Vec<f64> = Vec::new();
    for (text, at) in &received {
        let s = sent.iter().find(|s| &s.text == text).unwrap_or_else(|| panic!("delta {text:?} was never sent"));
        lat.push(ms(at.duration_since(s.at)));
    }
    assert_eq!(lat.len(), 50, "every delta arrives once: {received:?}");
    lat.sort_by(f64::total_cmp);
    println!(
        "e2e live latency (stand-in sent → SSE client received), real claude {} via na.sh + supervisor + API, {} deltas 100 ms apart:",
        support::common::real::CLAUDE_VERSION,
        lat.len()
    );
    println!(
        "  p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms   min {:.1} ms   (goal p50 ≤ 50 ms: {})",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat[lat.len() - 1],
        lat[0],
        if pct(&lat, 0.5) <= 50.0 { "met" } else { "NOT met" }
    );
    println!(
        "  baseline: an orchestrator running claude without partial messages, p50 2.3 s per delta → {:.0}× lower here",
        2300.0 / pct(&lat, 0.5)
    );
    let _ = wait_for(Duration::from_secs(30), || sup.child.try_wait().unwrap());
    drop(c);
    drop(api);
    drop(sup);
    drop(b);

    // 2. Kill → group gone, 10 runs.
    let (mut ack, mut gone, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..10 {
        let b = Bench::new();
        let env = RealEnv::new(b.dir.path(), &s).unwrap();
        let plan = format!(
            r#"{{"v":"plan/v1","slug":"kill{i}","tasks":[{{"id":"A","wave":1,"adapter":"claude","prompt":"Slowly. [anthropic:slow:600:100] run {i}"}}]}}"#
        );
        s.clear_sent();
        let _sup = b.start_supervised_with(&plan, "success", &[], &env.vars());
        let api = ApiProc::start(&b.home(), &[]);
        let run = b.run_id();
        wait_for(Duration::from_secs(60), || (s.sent().len() >= 3).then_some(())).expect("claude never streamed");
        let pgid = control(&b.sock(), &json!({"verb":"status"}))["tasks"]["A"]["pgid"].as_i64().unwrap() as i32;
        assert!(harness::supervisor::kill::group_alive(pgid));
        let t0 = Instant::now();
        let r = http(
            api.port,
            "POST",
            &format!("/runs/{run}/tasks/A/kill"),
            &[("Content-Type", "application/json")],
            Some(b"{}"),
        );
        let t_ack = Instant::now();
        assert_eq!(r.status, 200, "{}", r.text());
        while harness::supervisor::kill::group_alive(pgid) {
            std::thread::sleep(Duration::from_millis(1));
            assert!(t_ack.elapsed() < Duration::from_secs(30), "the group outlived the kill");
        }
        let t_gone = Instant::now();
        ack.push(ms(t_ack - t0));
        gone.push(ms(t_gone - t_ack));
        total.push(ms(t_gone - t0));
        control(&b.sock(), &json!({"verb":"stop"}));
    }
    for v in [&mut ack, &mut gone, &mut total] {
        v.sort_by(f64::total_cmp);
    }
    println!("e2e kill of a streaming real claude (API POST /kill), 10 runs:");
    println!("  request → acknowledged: median {:.1} ms, max {:.1} ms", pct(&ack, 0.5), ack[9]);
    println!(
        "  acknowledged → process group gone: median {:.1} ms, max {:.1} ms (the ack waits for the group)",
        pct(&gone, 0.5),
        gone[9]
    );
    println!(
        "  request → process group gone: median {:.1} ms, max {:.1} ms   (goal median ≤ 200 ms: {})",
        pct(&total, 0.5),
        total[9],
        if pct(&total, 0.5) <= 200.0 { "met" } else { "NOT met" }
    );
    println!("  = {:.2}× the 200 ms goal", pct(&total, 0.5) / 200.0);
}
