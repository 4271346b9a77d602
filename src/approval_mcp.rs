//! `harness approval-mcp`: the MCP permission tool of a batch claude turn whose plan asks
//! (`approvals: "ask"`). Claude starts it (`--mcp-config`, `--permission-prompt-tool
//! mcp__harness__approve`) and, with its stdin closed, calls the tool `approve` for each tool call its
//! permission flags do not allow. Each call becomes an `ask` on the run's control socket; the answer —
//! when the operator, a plan rule or the timeout decides — is claude's permission result. MCP over
//! stdio: newline-delimited JSON-RPC 2.0. While a call waits, `notifications/progress` keep claude's
//! MCP idle timeout (30 min by default) from cutting it.

use crate::control::{Act, Answer, Reply, Request};
use crate::ids::TaskId;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a waiting call tells claude it is still alive.
const PROGRESS: Duration = Duration::from_secs(15);

type Out = Arc<Mutex<std::io::Stdout>>;

fn send(out: &Out, v: &Value) {
    let mut line = serde_json::to_vec(v).expect("JSON");
    line.push(b'\n');
    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
    let _ = o.write_all(&line).and_then(|_| o.flush());
}

/// Serves MCP on stdin/stdout until stdin closes.
pub fn serve(socket: PathBuf, task: TaskId, wait: Duration) -> std::io::Result<()> {
    let out: Out = Arc::new(Mutex::new(std::io::stdout()));
    let stdin = std::io::stdin();
    for line in BufReader::new(stdin.lock()).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            send(&out, &json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}));
            continue;
        };
        let id = msg.get("id").cloned();
        let method = msg["method"].as_str().unwrap_or("");
        let Some(id) = id else { continue }; // a notification
        match method {
            "initialize" => {
                let version = msg["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18");
                send(
                    &out,
                    &json!({"jsonrpc":"2.0","id":id,"result":{
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "harness", "version": env!("CARGO_PKG_VERSION")}}}),
                );
            }
            "ping" => send(&out, &json!({"jsonrpc":"2.0","id":id,"result":{}})),
            "tools/list" => send(
                &out,
                &json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{
                    "name": "approve",
                    "description": "Asks the harness operator whether a tool call may run.",
                    "inputSchema": {"type": "object", "properties": {
                        "tool_name": {"type": "string"}, "input": {"type": "object"}, "tool_use_id": {"type": "string"}},
                        "required": ["tool_name", "input"]}}]}}),
            ),
            "tools/call" if msg["params"]["name"] == "approve" => {
                let (out, socket, task) = (out.clone(), socket.clone(), task.clone());
                std::thread::spawn(move || call(&out, id, &msg["params"], &socket, &task, wait));
            }
            "tools/call" => send(
                &out,
                &json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":format!("unknown tool {}", msg["params"]["name"])}}),
            ),
            other => send(
                &out,
                &json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":format!("method not found: {other}")}}),
            ),
        }
    }
    Ok(())
}

/// One `approve` call: asks the supervisor and answers with its decision (a deny saying why when the
/// supervisor cannot be asked, so the turn goes on).
fn call(out: &Out, id: Value, params: &Value, socket: &Path, task: &TaskId, wait: Duration) {
    let args = &params["arguments"];
    let tool = args["tool_name"].as_str().unwrap_or("(unnamed)").to_string();
    let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
    let tool_use_id = args["tool_use_id"].as_str().map(str::to_string);
    let token = params["_meta"]["progressToken"].clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if !token.is_null() {
        let (out, done) = (out.clone(), done.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            loop {
                std::thread::sleep(PROGRESS);
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                n += 1;
                send(
                    &out,
                    &json!({"jsonrpc":"2.0","method":"notifications/progress","params":{
                        "progressToken": token, "progress": n, "message": "waiting for the operator's decision"}}),
                );
            }
        });
    }
    let call = crate::control::Ask { task: task.clone(), tool, input, tool_use_id };
    let req = Request::new(Act::Ask(call), Some("approval-mcp".into()));
    let decision = match ask(socket, &req, wait) {
        Ok(Reply::Done(Answer::Ask { decision, .. })) => decision,
        Ok(Reply::Refused(r)) => json!({"behavior":"deny","message":format!("harness refused to ask: {}", r.detail)}),
        Ok(other) => {
            json!({"behavior":"deny","message":format!("harness answered unexpectedly: {}", serde_json::to_string(&other).unwrap_or_default())})
        }
        Err(e) => json!({"behavior":"deny","message":format!("harness could not ask the operator: {e}")}),
    };
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    send(out, &json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":decision.to_string()}]}}));
}

fn ask(socket: &Path, req: &Request, wait: Duration) -> std::io::Result<Reply> {
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(wait))?;
    let mut line = serde_json::to_vec(req).expect("a Request serializes");
    line.push(b'\n');
    s.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    serde_json::from_str(&answer).map_err(|e| std::io::Error::other(format!("answer is not a control/v1 reply: {e}")))
}
