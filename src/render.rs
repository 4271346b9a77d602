//! Human-readable rendering of events/v1 for a terminal (`harness watch`): tokens inline as they
//! stream, a block's final text only when its deltas were not shown, tool calls and results as
//! one-liners; `Transcript` keeps that text as lines for a pane that scrolls (`harness top`). Pure:
//! it keeps only what it needs to avoid printing a block twice, and the lines a pane shows.

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

/// What a terminal would show of a stream rendered by `Renderer`, kept as lines for a pane that
/// scrolls (`harness top`): the text of deltas joins on one line until a newline, as `harness watch`
/// prints it, and only the last `cap` finished lines are kept. Pure, like `Renderer`.
pub struct Transcript {
    renderer: Renderer,
    /// Finished lines, oldest first.
    lines: std::collections::VecDeque<String>,
    /// The line still being written (tokens stream into it until a newline ends it).
    partial: String,
    /// The most finished lines kept: a pane left open on a chatty task must not grow without end.
    cap: usize,
}

impl Transcript {
    pub fn new(cap: usize) -> Transcript {
        Transcript {
            renderer: Renderer::default(),
            lines: std::collections::VecDeque::new(),
            partial: String::new(),
            cap: cap.max(1),
        }
    }

    /// Adds one events/v1 event, rendered as `harness watch` renders it.
    pub fn push_event(&mut self, ev: &Value) {
        let text = self.renderer.render(ev);
        self.push_text(&text);
    }

    /// Adds a line of its own (a note about the stream, not an event): it never joins a partial line.
    pub fn push_line(&mut self, line: &str) {
        if !self.partial.is_empty() {
            self.push_text("\n");
        }
        self.push_text(line);
        self.push_text("\n");
    }

    /// Adds text as a terminal would print it: a newline ends the current line. A carriage return
    /// or another control character would move a real cursor; here it is dropped, and a tab is
    /// spaces, so a pane's cells hold only what prints.
    fn push_text(&mut self, text: &str) {
        for (i, piece) in text.split('\n').enumerate() {
            if i > 0 {
                let done = std::mem::take(&mut self.partial);
                self.lines.push_back(done);
                if self.lines.len() > self.cap {
                    self.lines.pop_front();
                }
            }
            for c in piece.chars() {
                match c {
                    '\t' => self.partial.push_str("    "),
                    c if c.is_control() => {}
                    c => self.partial.push(c),
                }
            }
        }
    }

    /// The lines to show, the partial one last (when it holds anything).
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        let partial = (!self.partial.is_empty()).then_some(self.partial.as_str());
        self.lines.iter().map(String::as_str).chain(partial)
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

    #[test]
    fn a_transcript_joins_deltas_on_a_line_and_keeps_the_last_lines() {
        let mut t = Transcript::new(3);
        let delta = |x: &str| json!({"type":"token_delta","data":{"text":x,"channel":"text","message_id":"m"}});
        for x in ["Hi", " there!", " This"] {
            t.push_event(&delta(x));
        }
        assert_eq!(t.lines().collect::<Vec<_>>(), ["Hi there! This"], "the partial line is shown");
        t.push_event(&delta(" is it.\nNext\tline"));
        t.push_event(&json!({"type":"tool_call","data":{"name":"Bash","args":{"command":"ls"}}}));
        t.push_line("(ended)");
        assert_eq!(t.lines().collect::<Vec<_>>(), ["Next    line", "→ Bash {\"command\":\"ls\"}", "(ended)"]);
    }
}
