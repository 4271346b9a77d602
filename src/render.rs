//! Human-readable rendering of events/v1 for a terminal (`harness watch`): tokens inline as they
//! stream, a block's final text only when its deltas were not shown, tool calls and results as
//! one-liners. Pure: it keeps only what it needs to avoid printing a block twice.

use serde_json::Value;

#[derive(Default)]
pub struct Renderer {
    /// message ids (or "" for id-less streams) whose deltas were printed since the last final block.
    streamed: std::collections::HashSet<String>,
    /// Whether the cursor is mid-line (inline tokens were printed).
    mid_line: bool,
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
    let flat = flat.trim().to_string();
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}

impl Renderer {
    /// The text to print for one event (may be empty; may not end with a newline while tokens stream).
    pub fn render(&mut self, ev: &Value) -> String {
        let d = &ev["data"];
        let mut out = String::new();
        let newline = |out: &mut String, mid: &mut bool| {
            if *mid {
                out.push('\n');
                *mid = false;
            }
        };
        match ev["type"].as_str().unwrap_or("") {
            "turn_start" => {
                newline(&mut out, &mut self.mid_line);
                out.push_str(&format!(
                    "── turn start{}{}\n",
                    d["session"].as_str().map(|s| format!(" · session {s}")).unwrap_or_default(),
                    d["model"].as_str().map(|s| format!(" · {s}")).unwrap_or_default()
                ));
            }
            "token_delta" => {
                let key = d["message_id"].as_str().unwrap_or("").to_string();
                let text = d["text"].as_str().unwrap_or("");
                let thinking = d["channel"] == "thinking";
                if d["final"] == true {
                    if self.streamed.remove(&key) {
                        newline(&mut out, &mut self.mid_line);
                    } else {
                        newline(&mut out, &mut self.mid_line);
                        if thinking {
                            out.push_str(&format!("(thinking) {}\n", one_line(text, 400)));
                        } else {
                            out.push_str(text);
                            out.push('\n');
                        }
                    }
                } else {
                    if !self.mid_line && thinking {
                        out.push_str("(thinking) ");
                    }
                    self.streamed.insert(key);
                    out.push_str(text);
                    self.mid_line = !text.ends_with('\n');
                }
            }
            "tool_call" => {
                newline(&mut out, &mut self.mid_line);
                out.push_str(&format!(
                    "→ {} {}\n",
                    d["name"].as_str().unwrap_or("tool"),
                    one_line(&d["args"].to_string(), 160)
                ));
            }
            "tool_result" => {
                newline(&mut out, &mut self.mid_line);
                let status = match (d["is_error"] == true, d["exit_code"].as_i64()) {
                    (true, Some(c)) => format!("error (exit {c})"),
                    (true, None) => "error".into(),
                    (false, Some(c)) if c != 0 => format!("exit {c}"),
                    _ => "ok".into(),
                };
                out.push_str(&format!("← {status}: {}\n", one_line(d["output"].as_str().unwrap_or(""), 160)));
            }
            "turn_end" => {
                newline(&mut out, &mut self.mid_line);
                let mut bits = vec![if d["is_error"] == true { "error".to_string() } else { "ok".to_string() }];
                if let Some(r) = d["terminal_reason"].as_str() {
                    bits.push(r.to_string());
                }
                if let Some(ms) = d["duration_ms"].as_f64() {
                    bits.push(format!("{:.1} s", ms / 1000.0));
                }
                if let Some(c) = d["cost_usd"].as_f64() {
                    bits.push(format!("${c:.4}"));
                }
                out.push_str(&format!("── turn end: {}\n", bits.join(" · ")));
            }
            "error" => {
                newline(&mut out, &mut self.mid_line);
                out.push_str(&format!(
                    "! {}{}{}\n",
                    if d["fatal"] == true { "fatal: " } else { "" },
                    d["reason"].as_str().unwrap_or("error"),
                    d["message"].as_str().map(|m| format!(": {}", one_line(m, 200))).unwrap_or_default()
                ));
            }
            "exit" => {
                newline(&mut out, &mut self.mid_line);
                out.push_str(&format!("── exit rc={}\n", d["rc"]));
            }
            other => out.push_str(&format!("? {other}\n")),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deltas_inline_and_final_not_repeated() {
        let mut r = Renderer::default();
        let delta = |t: &str| json!({"type":"token_delta","data":{"text":t,"channel":"text","message_id":"m"}});
        let mut s = r.render(&delta("Hel"));
        s += &r.render(&delta("lo"));
        s += &r.render(
            &json!({"type":"token_delta","data":{"text":"Hello","channel":"text","final":true,"message_id":"m"}}),
        );
        s += &r.render(
            &json!({"type":"token_delta","data":{"text":"Whole block","channel":"text","final":true,"message_id":"n"}}),
        );
        s += &r.render(&json!({"type":"tool_call","data":{"name":"Bash","args":{"command":"echo hi"}}}));
        s += &r.render(&json!({"type":"exit","data":{"rc":0}}));
        assert_eq!(s, "Hello\nWhole block\n→ Bash {\"command\":\"echo hi\"}\n── exit rc=0\n");
    }
}
