//! `harness top`: a live terminal dashboard of every run and its tasks (ratatui), redrawn when the
//! API's `/watch` says a journal changed: state, wave, cost, idle, pause reason and stall marks.
//! Keys act through the API like the other commands: pause/resume, steer, kill, budget, and a
//! task's live stream in a pane. `--once` (in `remote.rs`) prints one frame as plain text instead.

use super::error::CliError;
use super::remote::{done_of, money, wave_of};
use crate::client::Client;
use crate::views::{self, Answer, RunDetail, RunRow, TaskView};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState};
use serde_json::Value;
use std::io::IsTerminal;
use std::sync::mpsc;
use std::time::Duration;

enum Msg {
    /// A journal changed (`/watch`).
    Changed,
    Key(event::KeyEvent),
    /// A line of the open stream pane (its generation, the text).
    Stream(u64, String),
}

#[derive(PartialEq, Clone, Copy)]
enum Focus {
    Runs,
    Tasks,
}

#[derive(PartialEq, Clone, Copy)]
enum Asking {
    Steer,
    Budget,
    Kill,
}

struct Top {
    client: Client,
    rt: tokio::runtime::Runtime,
    runs: Vec<RunRow>,
    detail: Option<RunDetail>,
    run_sel: TableState,
    task_sel: TableState,
    focus: Focus,
    asking: Option<(Asking, String)>,
    status: String,
    stream: Option<(u64, String, Vec<String>)>,
    generation: u64,
}

/// The body of a verb `top` asks for.
fn by_top() -> views::VerbBody {
    views::VerbBody { by: "top".into() }
}

fn copy(c: &Client) -> Client {
    c.clone()
}

/// `harness top`.
pub(super) fn run(client: Client) -> Result<(), CliError> {
    if !std::io::stdout().is_terminal() {
        return Err(CliError::Usage("harness top needs a terminal; `harness top --once` prints one frame".into()));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("starting the client runtime: {e}")))?;
    let (tx, rx) = mpsc::channel::<Msg>();
    // Journal changes, from /watch (reconnecting by itself).
    let (watch_client, wtx) = (copy(&client), tx.clone());
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        let _ = rt.block_on(watch_client.follow("/watch?since=now", None, |_| wtx.send(Msg::Changed).is_ok()));
    });
    let ktx = tx.clone();
    std::thread::spawn(move || {
        while let Ok(ev) = event::read() {
            if let Event::Key(k) = ev
                && k.kind != KeyEventKind::Release
                && ktx.send(Msg::Key(k)).is_err()
            {
                return;
            }
        }
    });
    let mut top = Top {
        client,
        rt,
        runs: Vec::new(),
        detail: None,
        run_sel: TableState::default().with_selected(Some(0)),
        task_sel: TableState::default().with_selected(Some(0)),
        focus: Focus::Runs,
        asking: None,
        status: "q quit · ↑↓ select · tab runs/tasks · p pause/resume · s steer · x kill · b budget · enter stream"
            .into(),
        stream: None,
        generation: 0,
    };
    top.refresh();
    let mut terminal = ratatui::init();
    let result = (|| -> Result<(), CliError> {
        loop {
            terminal.draw(|f| top.draw(f)).map_err(|e| CliError::Failed(format!("drawing: {e}")))?;
            let msg = match rx.recv_timeout(Duration::from_secs(2)) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let mut changed = msg.is_none(); // a slow tick refreshes idle times
            let mut pending = msg.into_iter().collect::<Vec<_>>();
            // Everything already queued is handled before the next frame (one refresh for many changes).
            while let Ok(m) = rx.try_recv() {
                pending.push(m);
            }
            for m in pending {
                match m {
                    Msg::Changed => changed = true,
                    Msg::Stream(g, line) => {
                        if let Some((gen_, _, lines)) = &mut top.stream
                            && *gen_ == g
                        {
                            lines.push(line);
                            let excess = lines.len().saturating_sub(500);
                            lines.drain(..excess);
                        }
                    }
                    Msg::Key(k) => {
                        if !top.key(k, &tx) {
                            return Ok(());
                        }
                        changed = true;
                    }
                }
            }
            if changed {
                top.refresh();
            }
        }
    })();
    ratatui::restore();
    result
}

impl Top {
    /// A view the API answers `path` with (`None`: no answer, not a 200, or not that view).
    fn get<T: for<'de> serde::Deserialize<'de>>(&self, path: &str) -> Option<T> {
        let (status, body) = self.rt.block_on(self.client.call("GET", path, None)).ok()?;
        (status == 200).then(|| serde_json::from_slice(&body).ok()).flatten()
    }

    fn post(&mut self, path: &str, body: &impl serde::Serialize) {
        let body = serde_json::to_value(body).expect("a request body serializes");
        self.status = match self.rt.block_on(self.client.call("POST", path, Some(&body))) {
            Ok((status, bytes)) => {
                let answer = serde_json::from_slice::<Answer>(&bytes).ok();
                let detail = answer.and_then(|a| a.detail).unwrap_or_default();
                if status == 200 { format!("ok: {detail}") } else { format!("{status}: {detail}") }
            }
            Err(e) => format!("unreachable: {e}"),
        };
    }

    fn refresh(&mut self) {
        if let Some(runs) = self.get("/runs?limit=500") {
            self.runs = runs;
        }
        let n = self.runs.len();
        if self.run_sel.selected().is_none_or(|i| i >= n) {
            self.run_sel.select((n > 0).then_some(0));
        }
        self.detail = self.selected_run().and_then(|id| self.get(&format!("/runs/{id}")));
    }

    fn selected_run(&self) -> Option<String> {
        self.run_sel.selected().and_then(|i| self.runs.get(i)).map(|r| r.run.run_id.to_string())
    }

    /// The selected run's tasks, with their waves.
    fn tasks(&self) -> Vec<(u32, &TaskView)> {
        let Some(d) = &self.detail else { return Vec::new() };
        d.plan.waves.iter().flat_map(|w| w.tasks.iter().map(move |t| (w.wave, t))).collect()
    }

    fn selected_task(&self) -> Option<String> {
        let tasks = self.tasks();
        self.task_sel.selected().and_then(|i| tasks.get(i)).map(|(_, t)| t.id.to_string())
    }

    /// Handles a key; false to quit.
    fn key(&mut self, k: event::KeyEvent, tx: &mpsc::Sender<Msg>) -> bool {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return false;
        }
        if let Some((what, mut text)) = self.asking.take() {
            match (what, k.code) {
                (_, KeyCode::Esc) => self.status = "cancelled".into(),
                (Asking::Kill, KeyCode::Char('y')) => {
                    if let (Some(run), Some(task)) = (self.selected_run(), self.selected_task()) {
                        self.post(&format!("/runs/{run}/tasks/{task}/kill"), &by_top());
                    }
                }
                (Asking::Kill, _) => self.status = "not killed".into(),
                (_, KeyCode::Enter) => self.submit(what, text.trim()),
                (_, KeyCode::Backspace) => {
                    text.pop();
                    self.asking = Some((what, text));
                }
                (_, KeyCode::Char(c)) => {
                    text.push(c);
                    self.asking = Some((what, text));
                }
                _ => self.asking = Some((what, text)),
            }
            return true;
        }
        match k.code {
            KeyCode::Char('q') => return false,
            KeyCode::Esc if self.stream.is_some() => self.stream = None,
            KeyCode::Esc => return false,
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = if self.focus == Focus::Runs { Focus::Tasks } else { Focus::Runs };
            }
            KeyCode::Up | KeyCode::Down => {
                let down = k.code == KeyCode::Down;
                let (sel, n) = match self.focus {
                    Focus::Runs => (&mut self.run_sel, self.runs.len()),
                    Focus::Tasks => {
                        let n = self.tasks().len();
                        (&mut self.task_sel, n)
                    }
                };
                if n > 0 {
                    let i = sel.selected().unwrap_or(0);
                    sel.select(Some(if down { (i + 1).min(n - 1) } else { i.saturating_sub(1) }));
                }
                if self.focus == Focus::Runs {
                    self.task_sel.select(Some(0));
                    self.stream = None;
                }
            }
            KeyCode::Char('p') => {
                if let Some(run) = self.selected_run() {
                    let paused = self.detail.as_ref().is_some_and(|d| d.run.paused);
                    let verb = if paused { "resume" } else { "pause" };
                    self.post(&format!("/runs/{run}/{verb}"), &by_top());
                }
            }
            KeyCode::Char('s') if self.selected_task().is_some() => self.asking = Some((Asking::Steer, String::new())),
            KeyCode::Char('x') if self.selected_task().is_some() => self.asking = Some((Asking::Kill, String::new())),
            KeyCode::Char('b') if self.selected_run().is_some() => self.asking = Some((Asking::Budget, String::new())),
            KeyCode::Enter => self.open_stream(tx),
            _ => {}
        }
        true
    }

    fn submit(&mut self, what: Asking, text: &str) {
        let (Some(run), task) = (self.selected_run(), self.selected_task()) else { return };
        match what {
            Asking::Steer if !text.is_empty() => {
                if let Some(task) = task {
                    let body =
                        views::SteerBody { msg: text.into(), comments: Vec::new(), interrupt: false, by: "top".into() };
                    self.post(&format!("/runs/{run}/tasks/{task}/steer"), &body);
                }
            }
            Asking::Budget => match text.trim_start_matches('$').parse::<f64>() {
                Ok(usd) if usd.is_finite() && usd > 0.0 => {
                    self.post(&format!("/runs/{run}/budget"), &views::BudgetBody { usd, task: None, by: "top".into() })
                }
                _ => self.status = format!("not a budget: {text:?} (a positive number of US dollars)"),
            },
            _ => self.status = "nothing sent".into(),
        }
    }

    /// The selected task's live stream in a pane (Esc closes it).
    fn open_stream(&mut self, tx: &mpsc::Sender<Msg>) {
        let (Some(run), Some(task)) = (self.selected_run(), self.selected_task()) else { return };
        self.generation += 1;
        let g = self.generation;
        self.stream = Some((g, format!("{run} / {task}"), Vec::new()));
        let (client, tx) = (copy(&self.client), tx.clone());
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            let mut r = crate::render::Renderer::default();
            let path = format!("/runs/{run}/tasks/{task}/stream");
            let follow = client.follow(&path, None, |e| {
                if let Some(end) = e.end() {
                    return tx.send(Msg::Stream(g, format!("(ended: {})", end.detail))).is_ok();
                }
                let v: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                r.render(&v).lines().all(|l| tx.send(Msg::Stream(g, l.to_string())).is_ok())
            });
            if let Ok(status) = rt.block_on(follow)
                && status != 200
            {
                let _ = tx.send(Msg::Stream(
                    g,
                    format!("(no live stream: {status}; `harness watch` shows its recorded events)"),
                ));
            }
        });
    }

    fn draw(&mut self, f: &mut ratatui::Frame) {
        let [runs_area, tasks_area, foot] =
            Layout::vertical([Constraint::Percentage(40), Constraint::Fill(1), Constraint::Length(2)]).areas(f.area());
        let header = Row::new(["RUN", "STATUS", "WAVE", "DONE", "COST", "PAUSED", "ATTENTION"])
            .style(Style::default().add_modifier(Modifier::BOLD));
        let rows = self.runs.iter().map(|RunRow { run: r, supervisor, .. }| {
            let marks = r.attention_marks;
            // What asks for a person first: a gone supervisor, what blocks the run, then stalls.
            let attention = if *supervisor == crate::views::Supervisor::Gone {
                "supervisor gone".to_string()
            } else if let Some(b) = r.blocked_by.first() {
                format!("blocked by {}", b.task.as_str())
            } else if marks > 0 {
                format!("{marks} stall(s)")
            } else {
                String::new()
            };
            Row::new([
                r.run_id.to_string(),
                r.status.to_string(),
                wave_of(r),
                done_of(r),
                money(Some(&r.usage)),
                r.pause_reason.map_or(String::new(), |p| p.to_string()),
                attention,
            ])
        });
        let widths = [
            Constraint::Fill(3),
            Constraint::Length(9),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(11),
            Constraint::Length(16),
        ];
        let hl = |on: bool| if on { Style::default().add_modifier(Modifier::REVERSED) } else { Style::default() };
        let runs = Table::new(rows, widths)
            .header(header)
            .row_highlight_style(hl(self.focus == Focus::Runs))
            .block(Block::default().borders(Borders::ALL).title(format!(" harness top · {} run(s) ", self.runs.len())));
        f.render_stateful_widget(runs, runs_area, &mut self.run_sel);
        if let Some((_, title, lines)) = &self.stream {
            let h = tasks_area.height.saturating_sub(2) as usize;
            let text: Vec<Line> =
                lines.iter().skip(lines.len().saturating_sub(h)).map(|l| Line::from(l.as_str())).collect();
            let pane = Paragraph::new(text)
                .block(Block::default().borders(Borders::ALL).title(format!(" {title} · esc closes ")));
            f.render_widget(pane, tasks_area);
        } else {
            let marks = self.detail.as_ref().map_or(&[][..], |d| &d.attention[..]);
            let rows = self.tasks().into_iter().map(|(w, t)| {
                let stalled = marks.iter().any(|m| m.task == t.id);
                Row::new([
                    t.id.to_string(),
                    format!("w{w}"),
                    t.facts.state.to_string(),
                    money(t.usage.as_ref()),
                    t.idle_s.flatten().map(|s| format!("{s:.0}s idle")).unwrap_or_default(),
                    if stalled { "stalled".to_string() } else { String::new() },
                    t.facts.detail.as_deref().unwrap_or("").chars().take(80).collect::<String>(),
                ])
            });
            let widths = [
                Constraint::Length(16),
                Constraint::Length(4),
                Constraint::Length(12),
                Constraint::Length(9),
                Constraint::Length(10),
                Constraint::Length(8),
                Constraint::Fill(1),
            ];
            let title = match &self.detail {
                Some(d) => format!(
                    " {} · {}{} ",
                    d.run.run_id,
                    d.run.status,
                    d.run.pause_detail.as_deref().map(|p| format!(" ({p})")).unwrap_or_default()
                ),
                None => " tasks ".into(),
            };
            let tasks = Table::new(rows, widths)
                .header(
                    Row::new(["TASK", "WAVE", "STATE", "COST", "IDLE", "MARK", "DETAIL"])
                        .style(Style::default().add_modifier(Modifier::BOLD)),
                )
                .row_highlight_style(hl(self.focus == Focus::Tasks))
                .block(Block::default().borders(Borders::ALL).title(title));
            f.render_stateful_widget(tasks, tasks_area, &mut self.task_sel);
        }
        let prompt = match &self.asking {
            Some((Asking::Steer, t)) => {
                format!("steer {}: {t}_  (enter sends, esc cancels)", self.selected_task().unwrap_or_default())
            }
            Some((Asking::Budget, t)) => format!("budget of the run in US dollars: {t}_  (enter sets, esc cancels)"),
            Some((Asking::Kill, _)) => format!("kill {}? y/n", self.selected_task().unwrap_or_default()),
            None => self.status.clone(),
        };
        f.render_widget(Paragraph::new(prompt), foot);
    }
}
