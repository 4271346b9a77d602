//! Claude Code's permission rules — `Tool` or `Tool(specifier)` — as a plan's `allowed_tools` and
//! `approve` state them: splitting a rule string the way claude's `--allowedTools` does, checking a
//! rule's shape, and deciding whether a tool call falls under an `approve` rule. Pure functions.
//!
//! Matching is deliberately narrower than claude's own: a rule that would let more through than its
//! text says does not match (a Bash command that chains or redirects — `;`, `&&`, `|`, `>`, `` ` ``,
//! `$(` … — never matches a prefix rule), so an operator is asked instead.

use serde_json::Value;

/// The rules of one string: split on commas and whitespace outside parentheses
/// (`"Read Bash(npm test:*)"` → `Read`, `Bash(npm test:*)`).
pub fn split(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// One rule: a tool name and, optionally, what of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub tool: String,
    pub spec: Option<String>,
}

impl Rule {
    pub fn parse(s: &str) -> Result<Rule, String> {
        let s = s.trim();
        let (tool, spec) = match s.find('(') {
            None => (s, None),
            Some(i) => {
                let Some(inner) = s[i + 1..].strip_suffix(')') else {
                    return Err(format!("rule {s:?}: a specifier must end with ')'"));
                };
                if inner.trim().is_empty() {
                    return Err(format!("rule {s:?}: an empty specifier (write just the tool name)"));
                }
                (&s[..i], Some(inner.to_string()))
            }
        };
        let ok = !tool.is_empty()
            && tool.len() <= 128
            && tool.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.'));
        if !ok {
            return Err(format!(
                "rule {s:?}: a tool name is letters, digits and _-:. (e.g. Bash, Read, mcp__srv__tool)"
            ));
        }
        Ok(Rule { tool: tool.to_string(), spec })
    }

    /// Whether the call `tool(input)` falls under this rule.
    pub fn matches(&self, tool: &str, input: &Value) -> bool {
        if self.tool != tool {
            return false;
        }
        let Some(spec) = &self.spec else { return true };
        let str_of = |k: &str| input.get(k).and_then(Value::as_str);
        match tool {
            "Bash" => str_of("command").is_some_and(|cmd| bash_matches(spec, cmd)),
            "Read" | "Edit" | "Write" | "MultiEdit" | "NotebookEdit" | "Glob" | "Grep" => {
                let path = str_of("file_path").or_else(|| str_of("notebook_path")).or_else(|| str_of("path"));
                path.is_some_and(|p| glob(spec, p))
            }
            "WebFetch" => match (spec.strip_prefix("domain:"), str_of("url")) {
                (Some(domain), Some(url)) => host_of(url).is_some_and(|h| h.eq_ignore_ascii_case(domain)),
                _ => false,
            },
            // A specifier this module does not understand never matches: ask instead.
            _ => false,
        }
    }
}

/// `npm test:*` is a prefix (`npm test`, `npm test -- x`); anything else is the exact command. A
/// command that chains, pipes, substitutes or redirects matches no rule.
fn bash_matches(spec: &str, cmd: &str) -> bool {
    let cmd = cmd.trim();
    const META: [&str; 9] = [";", "&&", "||", "|", "`", "$(", ">", "<", "\n"];
    if META.iter().any(|m| cmd.contains(m)) || cmd.ends_with('&') {
        return false;
    }
    match spec.strip_suffix(":*") {
        Some(prefix) => {
            let prefix = prefix.trim();
            cmd == prefix || cmd.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(char::is_whitespace))
        }
        None => cmd == spec.trim(),
    }
}

/// A glob: `**` any run of characters, `*` any run without `/`, `?` one character but `/`.
fn glob(pat: &str, s: &str) -> bool {
    fn go(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') if p.get(1) == Some(&'*') => (0..=s.len()).any(|i| go(&p[2..], &s[i..])),
            Some('*') => (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != '/').any(|i| go(&p[1..], &s[i..])),
            Some('?') => s.first().is_some_and(|&c| c != '/') && go(&p[1..], &s[1..]),
            Some(c) => s.first() == Some(c) && go(&p[1..], &s[1..]),
        }
    }
    let p: Vec<char> = pat.chars().collect();
    let s: Vec<char> = s.chars().collect();
    go(&p, &s)
}

fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let host = rest.split(['/', '?', '#']).next()?;
    let host = host.rsplit('@').next()?;
    Some(host.split(':').next().unwrap_or(host))
}

/// The first rule of `rules` the call falls under.
pub fn first_match<'a>(rules: &'a [String], tool: &str, input: &Value) -> Option<&'a str> {
    rules.iter().find(|r| Rule::parse(r).is_ok_and(|rule| rule.matches(tool, input))).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_like_claude() {
        assert_eq!(split("Read Bash(npm test:*)"), ["Read", "Bash(npm test:*)"]);
        assert_eq!(split("Read,Write  Bash(git log:*), Grep"), ["Read", "Write", "Bash(git log:*)", "Grep"]);
        assert!(Rule::parse("Bash(").is_err());
        assert!(Rule::parse("Bash()").is_err());
        assert!(Rule::parse("rm -rf").is_err());
        assert_eq!(Rule::parse("mcp__srv__t").unwrap().spec, None);
    }

    #[test]
    fn bash_prefix_rules_never_let_a_chain_through() {
        let r = Rule::parse("Bash(npm test:*)").unwrap();
        let cmd = |c: &str| json!({ "command": c });
        assert!(r.matches("Bash", &cmd("npm test")));
        assert!(r.matches("Bash", &cmd("npm test -- --watch=false")));
        assert!(!r.matches("Bash", &cmd("npm testing")));
        assert!(!r.matches("Bash", &cmd("npm test; rm -rf /")));
        assert!(!r.matches("Bash", &cmd("npm test && curl x")));
        assert!(!r.matches("Bash", &cmd("npm test | sh")));
        assert!(!r.matches("Bash", &cmd("npm test > /etc/passwd")));
        assert!(!r.matches("Bash", &cmd("npm test $(curl x)")));
        assert!(!r.matches("Read", &json!({"file_path": "x"})));
        let exact = Rule::parse("Bash(echo hi)").unwrap();
        assert!(exact.matches("Bash", &cmd("echo hi")) && !exact.matches("Bash", &cmd("echo hi there")));
        assert!(Rule::parse("Bash").unwrap().matches("Bash", &cmd("anything; at all")));
    }

    #[test]
    fn path_and_domain_rules() {
        let r = Rule::parse("Edit(src/**)").unwrap();
        assert!(r.matches("Edit", &json!({"file_path": "src/a/b.rs"})));
        assert!(!r.matches("Edit", &json!({"file_path": "tests/it/a.rs"})));
        let one = Rule::parse("Read(*.md)").unwrap();
        assert!(one.matches("Read", &json!({"file_path": "README.md"})));
        assert!(!one.matches("Read", &json!({"file_path": "docs/a.md"})));
        let w = Rule::parse("WebFetch(domain:docs.rs)").unwrap();
        assert!(w.matches("WebFetch", &json!({"url": "https://docs.rs/tokio"})));
        assert!(!w.matches("WebFetch", &json!({"url": "https://evil.example/docs.rs"})));
        assert_eq!(
            first_match(&["Read".into(), "Bash(ls:*)".into()], "Bash", &json!({"command":"ls -la"})),
            Some("Bash(ls:*)")
        );
    }
}
