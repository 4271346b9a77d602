//! `harness top`: a live terminal dashboard of every run and its tasks (ratatui), redrawn when the
//! API's `/watch` says a journal changed and on a slow tick: state, wave, cost, idle, pause reason
//! and stall marks. Live, blocked and paused runs come first, and a run reads by its slug with its
//! hash shortened. Keys act through the API like the other commands — pause/resume, steer, kill,
//! retry, skip, budget — and open a pane over the tasks: a task's events (its `/feed`: recorded,
//! then live, rendered as `harness watch` prints them) or its diff. `?` lists every key. While the
//! API does not answer, the screen says so and `top` keeps retrying; it never reaches a journal or
//! a supervisor but through the API. `--once` (in `remote.rs`) prints one frame as plain text.

use super::error::CliError;
use super::remote::{done_of, is_not_live, money, not_live, wave_of};
use crate::client::{Client, Unreachable};
use crate::ids::RunId;
use crate::render::Transcript;
use crate::views::{self, Answer, RunDetail, RunRow, RunStatus, TaskView};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState};
use serde_json::Value;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the screen is refreshed with nothing else to say (idle times move on).
const IDLE_TICK: Duration = Duration::from_secs(2);
/// How often `top` asks again while the API does not answer: a restarted API shows up within it.
const RETRY_TICK: Duration = Duration::from_secs(1);
/// The most lines a stream pane keeps (a pane left open on a chatty task must stay small).
const STREAM_LINES: usize = 5000;

enum Msg {
    /// A journal changed (`/watch`).
    Changed,
    Key(event::KeyEvent),
    /// What the open stream pane's feed sent (the pane's generation, the item).
    Feed(u64, Fed),
}

/// One item of a task's feed.
enum Fed {
    /// An events/v1 event's JSON.
    Event(String),
    /// A line about the feed itself: its end, or why it could not be followed.
    Note(String),
}

#[derive(PartialEq, Clone, Copy)]
enum Focus {
    Runs,
    Tasks,
}

/// What the footer asks for while a person types.
#[derive(PartialEq, Clone, Copy)]
enum Asking {
    Steer,
    Budget,
    Kill,
    /// A skip's reason (the API journals it, so it is asked for like a steer's message).
    Skip,
    /// The runs filter, applied as it is typed.
    Filter,
}

/// A key that moves: the selection in a list, the view in a pane.
#[derive(PartialEq, Clone, Copy, Debug)]
enum Motion {
    Up,
    Down,
    PageUp,
    PageDown,
    First,
    Last,
}

impl Motion {
    fn of(code: KeyCode) -> Option<Motion> {
        Some(match code {
            KeyCode::Up | KeyCode::Char('k') => Motion::Up,
            KeyCode::Down | KeyCode::Char('j') => Motion::Down,
            KeyCode::PageUp => Motion::PageUp,
            KeyCode::PageDown => Motion::PageDown,
            KeyCode::Home | KeyCode::Char('g') => Motion::First,
            KeyCode::End | KeyCode::Char('G') => Motion::Last,
            _ => return None,
        })
    }

    /// Where a cursor at `at` among `n` places goes, `page` places to a page.
    fn apply(self, at: usize, n: usize, page: usize) -> usize {
        let last = n.saturating_sub(1);
        match self {
            Motion::Up => at.saturating_sub(1),
            Motion::Down => (at + 1).min(last),
            Motion::PageUp => at.saturating_sub(page.max(1)),
            Motion::PageDown => (at + page.max(1)).min(last),
            Motion::First => 0,
            Motion::Last => last,
        }
    }
}

/// What a pane over the tasks shows.
enum Pane {
    /// A task's feed; its generation tells its messages from those of a pane closed since.
    Stream { generation: u64, title: String, text: Transcript },
    /// A task's diff, a line each.
    Diff { title: String, lines: Vec<String> },
}

impl Pane {
    fn title(&self) -> &str {
        match self {
            Pane::Stream { title, .. } | Pane::Diff { title, .. } => title,
        }
    }

    /// Its lines cut to `width` cells (so a line is a row and scrolling counts rows), styled.
    fn rows(&self, width: usize) -> Vec<Line<'static>> {
        match self {
            Pane::Stream { text, .. } => text.lines().flat_map(|l| wrap(l, width)).map(Line::raw).collect(),
            Pane::Diff { lines, .. } => lines
                .iter()
                .flat_map(|l| {
                    let style = diff_style(l);
                    wrap(l, width).into_iter().map(move |w| Line::styled(w, style))
                })
                .collect(),
        }
    }
}

/// A diff line's colour, as `git diff --color` gives it.
fn diff_style(line: &str) -> Style {
    let s = Style::default();
    if line.starts_with("+++") || line.starts_with("---") || line.starts_with("diff ") {
        s.add_modifier(Modifier::BOLD)
    } else if line.starts_with('+') {
        s.fg(Color::Green)
    } else if line.starts_with('-') {
        s.fg(Color::Red)
    } else if line.starts_with("@@") {
        s.fg(Color::Cyan)
    } else {
        s
    }
}

/// `line` in pieces of at most `width` characters (one empty piece for an empty line).
fn wrap(line: &str, width: usize) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    if chars.is_empty() || width == 0 {
        return vec![line.to_string()];
    }
    chars.chunks(width).map(|c| c.iter().collect()).collect()
}

/// The open pane and where it is scrolled to.
struct Open {
    pane: Pane,
    /// The first row shown; `None` follows the end (new lines of a live stream come into view).
    scroll: Option<usize>,
    /// Rows in all and rows shown, as last drawn (what a page and the end are).
    drawn: (usize, usize),
}

impl Open {
    fn scroll(&mut self, m: Motion) {
        let (n, h) = self.drawn;
        let max_top = n.saturating_sub(h);
        let top = self.scroll.map_or(max_top, |t| t.min(max_top));
        let to = m.apply(top, max_top + 1, h.saturating_sub(1));
        self.scroll = (to < max_top).then_some(to);
    }
}

/// Whether the API answers. While it does not, the screen says so over what it said last.
enum Link {
    Up,
    Down { why: String, since: Instant },
}

struct Top {
    client: Client,
    rt: tokio::runtime::Runtime,
    /// Every run the API listed, in `order_runs`' order.
    all: Vec<RunRow>,
    /// The runs shown: `all` through the filter.
    runs: Vec<RunRow>,
    detail: Option<RunDetail>,
    run_sel: TableState,
    task_sel: TableState,
    focus: Focus,
    asking: Option<(Asking, String)>,
    /// `/`'s text: only runs whose id holds it are shown (empty: all).
    filter: String,
    status: String,
    /// The status line tells of an unreachable API: it is cleared when the API answers again.
    status_unreachable: bool,
    pane: Option<Open>,
    help: bool,
    link: Link,
    /// The open stream pane's generation; a feed's thread ends when it is no longer its own.
    generation: Arc<AtomicU64>,
    /// Rows of the runs and tasks tables as last drawn (their page for PgUp/PgDn).
    pages: (usize, usize),
}

/// The body of a verb `top` asks for.
fn by_top() -> views::VerbBody {
    views::VerbBody { by: "top".into() }
}

fn copy(c: &Client) -> Client {
    c.clone()
}

/// An error answer's detail (its `{ok: false, detail}`, else its text).
fn detail_of(body: &[u8]) -> String {
    serde_json::from_slice::<Answer>(body)
        .ok()
        .and_then(|a| a.detail)
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string())
}

/// Live, blocked and paused runs first — what a person may act on — then the rest, each group by
/// its latest activity (the journal's last record), newest first; the API's order among equals.
pub(super) fn order_runs(runs: &mut [RunRow]) {
    fn rank(r: &RunRow) -> u8 {
        match r.run.status {
            RunStatus::Blocked => 1,
            RunStatus::Paused => 2,
            RunStatus::Running => 0,
            _ if r.live => 0,
            _ => 3,
        }
    }
    let when = |r: &RunRow| r.run.updated.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    runs.sort_by_cached_key(|r| (rank(r), std::cmp::Reverse(when(r))));
}

/// How a run reads where room is short: its slug, then `·` and the first four hex digits of its
/// hash (`payments·a667`), which tell apart runs of one slug in other checkouts.
fn short_id(id: &RunId) -> String {
    // A RunId starts with 12 ASCII hex digits (its parser holds it), so 4 bytes are 4 characters.
    format!("{}·{}", id.slug().as_str(), &id.as_str()[..4])
}

/// A column of the runs table.
#[derive(PartialEq, Clone, Copy, Debug)]
enum Col {
    Run,
    Status,
    Wave,
    Done,
    Cost,
    Paused,
    Attention,
}

impl Col {
    /// In the order they are shown.
    const ALL: [Col; 7] = [Col::Run, Col::Status, Col::Wave, Col::Done, Col::Cost, Col::Paused, Col::Attention];

    fn head(self) -> &'static str {
        match self {
            Col::Run => "RUN",
            Col::Status => "STATUS",
            Col::Wave => "WAVE",
            Col::Done => "DONE",
            Col::Cost => "COST",
            Col::Paused => "PAUSED",
            Col::Attention => "ATTENTION",
        }
    }

    /// Its width (the run's is the longest id shown's).
    fn width(self) -> u16 {
        match self {
            Col::Run => 0,
            Col::Status => 9,
            Col::Wave => 5,
            Col::Done => 7,
            Col::Cost => 9,
            Col::Paused => 10,
            Col::Attention => 16,
        }
    }

    /// When a terminal is narrow, columns give way highest first: the status says most after the
    /// id, a pause's reason least (the status says `paused` already).
    fn gives_way(self) -> u8 {
        match self {
            Col::Run => 0,
            Col::Status => 1,
            Col::Done => 2,
            Col::Wave => 3,
            Col::Cost => 4,
            Col::Attention => 5,
            Col::Paused => 6,
        }
    }

    fn cell(self, RunRow { run: r, supervisor, .. }: &RunRow) -> Cell<'static> {
        let text = match self {
            Col::Run => short_id(&r.run_id),
            Col::Status => return Cell::from(Span::styled(r.status.label(), status_style(r.status))),
            Col::Wave => wave_of(r),
            Col::Done => done_of(r),
            Col::Cost => money(Some(&r.usage)),
            Col::Paused => r.pause_reason.map_or(String::new(), |p| p.to_string()),
            // What asks for a person first: a gone supervisor, what blocks the run, then stalls.
            Col::Attention if *supervisor == views::Supervisor::Gone => "supervisor gone".into(),
            Col::Attention => match r.blocked_by.first() {
                Some(b) => format!("blocked by {}", b.task.as_str()),
                None if r.attention_marks > 0 => format!("{} stall(s)", r.attention_marks),
                None => String::new(),
            },
        };
        Cell::from(text)
    }
}

fn status_style(s: RunStatus) -> Style {
    match s {
        RunStatus::Running => Style::default().fg(Color::Green),
        RunStatus::Blocked | RunStatus::Failed => Style::default().fg(Color::Red),
        RunStatus::Paused => Style::default().fg(Color::Yellow),
        _ => Style::default(),
    }
}

/// The runs table's columns that fit in `width` cells, with their widths: the id gets `id_w` first
/// (all of `width` when that is less), then the others, the last to give way first, while they
/// fit with a cell between two; the last column shown takes what is left.
fn fit_columns(width: u16, id_w: u16) -> Vec<(Col, u16)> {
    let id_w = id_w.min(width);
    let mut left = width - id_w;
    let mut by_keep = Col::ALL[1..].to_vec();
    by_keep.sort_by_key(|c| c.gives_way());
    let mut shown = vec![Col::Run];
    for c in by_keep {
        if c.width() < left {
            left -= c.width() + 1;
            shown.push(c);
        }
    }
    let mut cols: Vec<(Col, u16)> = Col::ALL
        .iter()
        .filter(|c| shown.contains(c))
        .map(|&c| (c, if c == Col::Run { id_w } else { c.width() }))
        .collect();
    if let Some(last) = cols.last_mut() {
        last.1 += left;
    }
    cols
}

/// The keys, as `?` lists them.
const KEYS: &[(&str, &str)] = &[
    ("↑ k  ↓ j", "move (in a pane: scroll)"),
    ("PgUp PgDn", "a page up / down"),
    ("g Home  G End", "the first / the last"),
    ("tab", "runs ⇄ tasks"),
    ("/", "filter runs by id (enter keeps it, esc clears it)"),
    ("enter", "the task's events: recorded, then live"),
    ("d", "the task's diff"),
    ("esc", "close the pane or this help; clear the filter"),
    ("p", "pause / resume the run"),
    ("s", "steer the task (asks for the message)"),
    ("x", "kill the task (asks y/n)"),
    ("r", "retry the halted task"),
    ("S", "skip the halted task (asks why)"),
    ("b", "the run's budget (asks for US dollars)"),
    ("?", "this help"),
    ("q  ctrl-c", "quit"),
];

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
    spawn_watch(copy(&client), tx.clone());
    spawn_keys(tx.clone());
    let mut top = Top::new(client, rt);
    top.refresh();
    let mut terminal = ratatui::init();
    let result = top.event_loop(&mut terminal, &rx, &tx);
    ratatui::restore();
    result
}

/// Sends `Msg::Changed` for each journal change `/watch` tells of, following it again for as long
/// as `top` runs: the API may be restarted under it.
fn spawn_watch(client: Client, tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        loop {
            let mut open = true;
            let _ = rt.block_on(client.follow("/watch?since=now", None, |_| {
                open = tx.send(Msg::Changed).is_ok();
                open
            }));
            if !open {
                return;
            }
            std::thread::sleep(RETRY_TICK);
        }
    });
}

fn spawn_keys(tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        while let Ok(ev) = event::read() {
            if let Event::Key(k) = ev
                && k.kind != KeyEventKind::Release
                && tx.send(Msg::Key(k)).is_err()
            {
                return;
            }
        }
    });
}

/// Follows a task's `/feed` on a thread of its own, sending what it says as `Msg::Feed(g, …)`,
/// until the feed ends or the pane that asked for it is closed (`current` is no longer `g`).
fn spawn_feed(client: Client, path: String, g: u64, current: Arc<AtomicU64>, tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        let mine = || current.load(Ordering::Relaxed) == g;
        let send = |item| tx.send(Msg::Feed(g, item)).is_ok();
        let follow = client.follow(&path, None, |e| {
            let item = match e.end() {
                Some(end) => Fed::Note(format!("(ended: {})", end.detail)),
                None => Fed::Event(e.data.clone()),
            };
            mine() && send(item)
        });
        // A live feed may say nothing for long: its pane's closing ends it all the same.
        let closed = async {
            while mine() {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };
        let ended = rt.block_on(async {
            tokio::select! {
                r = follow => Some(r),
                () = closed => None,
            }
        });
        let note = match ended {
            None | Some(Ok(200)) => return,
            Some(Ok(status)) => match rt.block_on(client.call("GET", &path, None)) {
                Ok((_, body)) => format!("(no feed: {status}: {})", detail_of(&body)),
                Err(e) => format!("(no feed: {status}; {e})"),
            },
            Some(Err(e)) => format!("(the feed stopped: {e})"),
        };
        send(Fed::Note(note));
    });
}

impl Top {
    fn new(client: Client, rt: tokio::runtime::Runtime) -> Top {
        Top {
            client,
            rt,
            all: Vec::new(),
            runs: Vec::new(),
            detail: None,
            run_sel: TableState::default().with_selected(Some(0)),
            task_sel: TableState::default().with_selected(Some(0)),
            focus: Focus::Runs,
            asking: None,
            filter: String::new(),
            status: String::new(),
            status_unreachable: false,
            pane: None,
            help: false,
            link: Link::Up,
            generation: Arc::new(AtomicU64::new(0)),
            pages: (1, 1),
        }
    }

    /// Draws, then handles what came in, until a key quits.
    fn event_loop(
        &mut self,
        terminal: &mut ratatui::DefaultTerminal,
        rx: &mpsc::Receiver<Msg>,
        tx: &mpsc::Sender<Msg>,
    ) -> Result<(), CliError> {
        loop {
            terminal.draw(|f| self.draw(f)).map_err(|e| CliError::Failed(format!("drawing: {e}")))?;
            let tick = if matches!(self.link, Link::Down { .. }) { RETRY_TICK } else { IDLE_TICK };
            let first = match rx.recv_timeout(tick) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let mut changed = first.is_none(); // a slow tick refreshes idle times
            // Everything already queued is handled before the next frame (one refresh for many changes).
            for m in first.into_iter().chain(rx.try_iter()) {
                match m {
                    Msg::Changed => changed = true,
                    Msg::Feed(g, item) => self.fed(g, item),
                    Msg::Key(k) => {
                        if !self.key(k, tx) {
                            return Ok(());
                        }
                        changed = true;
                    }
                }
            }
            if changed {
                self.refresh();
            }
        }
    }

    /// A view the API answers `path` with (`None`: not a 200, or not that view).
    fn fetch<T: for<'de> serde::Deserialize<'de>>(&self, path: &str) -> Result<Option<T>, Unreachable> {
        let (status, body) = self.rt.block_on(self.client.call("GET", path, None))?;
        Ok((status == 200).then(|| serde_json::from_slice(&body).ok()).flatten())
    }

    /// Sends a verb of `run`'s; the status line says its answer (a run no longer live as the
    /// CLI's verbs say it).
    fn post(&mut self, run: &RunId, path: &str, body: &impl serde::Serialize) {
        let body = serde_json::to_value(body).expect("a request body serializes");
        match self.rt.block_on(self.client.call("POST", path, Some(&body))) {
            Ok((status, bytes)) => {
                let detail = detail_of(&bytes);
                self.status = match status {
                    200 => format!("ok: {detail}"),
                    _ if is_not_live(status, &detail) => not_live(&self.client, &self.rt, run, path),
                    _ => format!("{status}: {detail}"),
                };
            }
            Err(e) => self.unreachable("not sent", e),
        }
    }

    /// `what` failed for want of an answer: the status line says so until the API answers again.
    fn unreachable(&mut self, what: &str, e: Unreachable) {
        self.status = format!("{what}: {e}");
        self.status_unreachable = true;
        self.link_down(e);
    }

    fn link_down(&mut self, e: Unreachable) {
        let since = match &self.link {
            Link::Down { since, .. } => *since,
            Link::Up => Instant::now(),
        };
        self.link = Link::Down { why: e.detail, since };
    }

    fn link_up(&mut self) {
        if matches!(self.link, Link::Down { .. }) {
            self.link = Link::Up;
            if self.status_unreachable {
                self.status = "reconnected".into();
                self.status_unreachable = false;
            }
        }
    }

    fn refresh(&mut self) {
        match self.fetch::<Vec<RunRow>>("/runs?limit=500") {
            Ok(Some(mut runs)) => {
                order_runs(&mut runs);
                self.all = runs;
            }
            Ok(None) => {}
            Err(e) => return self.link_down(e),
        }
        self.link_up();
        self.apply_filter();
        let id = self.selected_run();
        match id.as_ref().map(|id| self.fetch::<RunDetail>(&format!("/runs/{id}"))) {
            Some(Err(e)) => self.link_down(e),
            Some(Ok(d)) => self.detail = d,
            None => self.detail = None,
        }
    }

    /// Shows the runs the filter lets through, keeping the selected one selected where it moved to.
    fn apply_filter(&mut self) {
        let kept = self.selected_run();
        let needle = self.filter.to_lowercase();
        self.runs = self
            .all
            .iter()
            .filter(|r| {
                let id = &r.run.run_id;
                id.as_str().contains(&needle) || short_id(id).contains(&needle)
            })
            .cloned()
            .collect();
        let n = self.runs.len();
        let at = kept.and_then(|id| self.runs.iter().position(|r| r.run.run_id == id));
        let at = at.or_else(|| self.run_sel.selected().map(|i| i.min(n.saturating_sub(1))));
        if at != self.run_sel.selected() {
            self.task_sel.select(Some(0));
        }
        self.run_sel.select(if n == 0 { None } else { at.or(Some(0)) });
    }

    fn selected_run(&self) -> Option<RunId> {
        self.run_sel.selected().and_then(|i| self.runs.get(i)).map(|r| r.run.run_id.clone())
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

    /// The selected run and task, or why a key that needs them did nothing.
    fn selected_pair(&mut self) -> Option<(RunId, String)> {
        match (self.selected_run(), self.selected_task()) {
            (Some(run), Some(task)) => Some((run, task)),
            _ => {
                self.status = "no task selected".into();
                None
            }
        }
    }

    /// Handles a key; false to quit.
    fn key(&mut self, k: event::KeyEvent, tx: &mpsc::Sender<Msg>) -> bool {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return false;
        }
        if let Some((what, text)) = self.asking.take() {
            self.typed(what, text, k.code);
            return true;
        }
        if self.help {
            match k.code {
                KeyCode::Char('q') => return false,
                KeyCode::Esc | KeyCode::Char('?') | KeyCode::Enter => self.help = false,
                _ => {}
            }
            return true;
        }
        if let Some(m) = Motion::of(k.code) {
            self.motion(m);
            return true;
        }
        self.command(k.code, tx)
    }

    /// A key of the main screen that is not a motion; false to quit.
    fn command(&mut self, code: KeyCode, tx: &mpsc::Sender<Msg>) -> bool {
        let task = self.selected_task().is_some();
        match code {
            KeyCode::Char('q') => return false,
            KeyCode::Esc => self.escape(),
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('/') => self.asking = Some((Asking::Filter, self.filter.clone())),
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = if self.focus == Focus::Runs { Focus::Tasks } else { Focus::Runs };
            }
            KeyCode::Enter => self.open_stream(tx),
            KeyCode::Char('d') => self.open_diff(),
            KeyCode::Char('p') => self.pause_or_resume(),
            KeyCode::Char('r') => {
                if let Some((run, task)) = self.selected_pair() {
                    self.post(&run, &format!("/runs/{run}/tasks/{task}/retry"), &by_top());
                }
            }
            KeyCode::Char('s') if task => self.asking = Some((Asking::Steer, String::new())),
            KeyCode::Char('x') if task => self.asking = Some((Asking::Kill, String::new())),
            KeyCode::Char('S') if task => self.asking = Some((Asking::Skip, String::new())),
            KeyCode::Char('b') if self.selected_run().is_some() => self.asking = Some((Asking::Budget, String::new())),
            _ => {}
        }
        true
    }

    /// Esc closes what is open — the pane, else the filter — and never quits (q does).
    fn escape(&mut self) {
        if self.pane.take().is_some() {
            self.generation.fetch_add(1, Ordering::Relaxed);
        } else if !self.filter.is_empty() {
            self.filter.clear();
            self.apply_filter();
        } else {
            self.status = "nothing to close · q quits".into();
        }
    }

    fn motion(&mut self, m: Motion) {
        if let Some(open) = &mut self.pane {
            open.scroll(m);
            return;
        }
        let (sel, n, page) = match self.focus {
            Focus::Runs => (&mut self.run_sel, self.runs.len(), self.pages.0),
            Focus::Tasks => {
                let n = self.tasks().len();
                (&mut self.task_sel, n, self.pages.1)
            }
        };
        if n == 0 {
            return;
        }
        let at = sel.selected().unwrap_or(0);
        sel.select(Some(m.apply(at, n, page)));
        if self.focus == Focus::Runs && self.run_sel.selected() != Some(at) {
            self.task_sel.select(Some(0));
        }
    }

    /// A key while the footer asks for something.
    fn typed(&mut self, what: Asking, mut text: String, code: KeyCode) {
        match (what, code) {
            (Asking::Filter, KeyCode::Esc) => {
                self.filter.clear();
                self.apply_filter();
            }
            (Asking::Filter, KeyCode::Enter) => {}
            (_, KeyCode::Esc) => self.status = "cancelled".into(),
            (Asking::Kill, KeyCode::Char('y')) => {
                if let Some((run, task)) = self.selected_pair() {
                    self.post(&run, &format!("/runs/{run}/tasks/{task}/kill"), &by_top());
                }
            }
            (Asking::Kill, _) => self.status = "not killed".into(),
            (_, KeyCode::Enter) => self.submit(what, text.trim()),
            (_, KeyCode::Backspace | KeyCode::Char(_)) => {
                match code {
                    KeyCode::Char(c) => text.push(c),
                    _ => _ = text.pop(),
                }
                if what == Asking::Filter {
                    self.filter = text.clone();
                    self.apply_filter();
                }
                self.asking = Some((what, text));
            }
            _ => self.asking = Some((what, text)),
        }
    }

    fn submit(&mut self, what: Asking, text: &str) {
        let (Some(run), task) = (self.selected_run(), self.selected_task()) else { return };
        match (what, task) {
            (Asking::Steer, Some(task)) if !text.is_empty() => {
                let body =
                    views::SteerBody { msg: text.into(), comments: Vec::new(), interrupt: false, by: "top".into() };
                self.post(&run, &format!("/runs/{run}/tasks/{task}/steer"), &body);
            }
            (Asking::Skip, Some(task)) if !text.is_empty() => {
                let body = views::SkipBody { reason: text.into(), by: "top".into() };
                self.post(&run, &format!("/runs/{run}/tasks/{task}/skip"), &body);
            }
            (Asking::Skip, _) => self.status = "not skipped: a skip needs a reason".into(),
            (Asking::Budget, _) => match text.trim_start_matches('$').parse::<f64>() {
                Ok(usd) if usd.is_finite() && usd > 0.0 => self.post(
                    &run,
                    &format!("/runs/{run}/budget"),
                    &views::BudgetBody { usd, task: None, by: "top".into() },
                ),
                _ => self.status = format!("not a budget: {text:?} (a positive number of US dollars)"),
            },
            _ => self.status = "nothing sent".into(),
        }
    }

    fn pause_or_resume(&mut self) {
        if let Some(run) = self.selected_run() {
            let paused = self.detail.as_ref().is_some_and(|d| d.run.paused);
            let verb = if paused { "resume" } else { "pause" };
            self.post(&run, &format!("/runs/{run}/{verb}"), &by_top());
        }
    }

    /// Opens a pane in place of another (a stream pane's feed ends with it).
    fn open(&mut self, pane: Pane, scroll: Option<usize>) {
        if let Some(Open { pane: Pane::Stream { .. }, .. }) = self.pane {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
        self.pane = Some(Open { pane, scroll, drawn: (0, 0) });
    }

    /// The selected task's events in a pane: its `/feed` serves what it recorded, then what it
    /// sends live, for a finished task as for a working one.
    fn open_stream(&mut self, tx: &mpsc::Sender<Msg>) {
        let Some((run, task)) = self.selected_pair() else { return };
        let title = format!("{} / {task} · events", short_id(&run));
        // A new generation is this pane's, and retires a stream pane open before it.
        let g = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let text = Transcript::new(STREAM_LINES);
        self.pane = Some(Open { pane: Pane::Stream { generation: g, title, text }, scroll: None, drawn: (0, 0) });
        let path = format!("/runs/{run}/tasks/{task}/feed");
        spawn_feed(copy(&self.client), path, g, self.generation.clone(), tx.clone());
    }

    /// What the open stream pane's feed sent (dropped when it is a closed pane's).
    fn fed(&mut self, g: u64, item: Fed) {
        let Some(Open { pane: Pane::Stream { generation, text, .. }, .. }) = &mut self.pane else { return };
        if *generation != g {
            return;
        }
        match item {
            Fed::Event(data) => text.push_event(&serde_json::from_str(&data).unwrap_or(Value::Null)),
            Fed::Note(line) => text.push_line(&line),
        }
    }

    /// The selected task's diff (`GET …/diff`: its commit's, or its work so far) in a pane.
    fn open_diff(&mut self) {
        let Some((run, task)) = self.selected_pair() else { return };
        let path = format!("/runs/{run}/tasks/{task}/diff");
        match self.rt.block_on(self.client.call("GET", &path, None)) {
            Err(e) => self.unreachable("no diff", e),
            Ok((200, body)) => {
                let text = String::from_utf8_lossy(&body);
                let mut lines: Vec<String> = text.lines().map(|l| l.replace('\t', "    ")).collect();
                if lines.is_empty() {
                    lines.push("(no change yet)".into());
                }
                self.open(Pane::Diff { title: format!("{} / {task} · diff", short_id(&run)), lines }, Some(0));
            }
            Ok((status, body)) => self.status = format!("no diff: {status}: {}", detail_of(&body)),
        }
    }

    fn draw(&mut self, f: &mut ratatui::Frame) {
        let area = f.area();
        // The runs take what they need, up to 40% of the screen: the rest shows tasks or a pane.
        let most = (area.height * 2 / 5).max(5);
        let runs_h = (self.runs.len() as u16).saturating_add(3).clamp(5, most);
        let [runs_area, lower, foot] =
            Layout::vertical([Constraint::Length(runs_h), Constraint::Fill(1), Constraint::Length(2)]).areas(area);
        self.draw_runs(f, runs_area);
        if self.pane.is_some() {
            self.draw_pane(f, lower);
        } else {
            self.draw_tasks(f, lower);
        }
        self.draw_footer(f, foot);
        if self.help {
            draw_help(f, area);
        }
    }

    fn draw_runs(&mut self, f: &mut ratatui::Frame, area: Rect) {
        let id_w = self.runs.iter().map(|r| short_id(&r.run.run_id).chars().count()).max().unwrap_or(0).max(3);
        let cols = fit_columns(area.width.saturating_sub(2), id_w as u16);
        let down = matches!(self.link, Link::Down { .. });
        let header = Row::new(cols.iter().map(|(c, _)| c.head())).style(Style::default().add_modifier(Modifier::BOLD));
        // While the API does not answer, its last rows are shown dimmed: they may be out of date.
        let stale = if down { Style::default().fg(Color::DarkGray) } else { Style::default() };
        let rows = self.runs.iter().map(|r| Row::new(cols.iter().map(|(c, _)| c.cell(r))).style(stale));
        let mut title = match (self.filter.is_empty(), self.runs.len()) {
            (true, n) => format!(" harness top · {n} run(s) "),
            (false, n) => format!(" harness top · {n} of {} run(s) · filter {:?} ", self.all.len(), self.filter),
        };
        let mut block = Block::default().borders(Borders::ALL);
        if down {
            title.push_str("· disconnected — retrying ");
            block = block.border_style(Style::default().fg(Color::Red));
        }
        let runs = Table::new(rows, cols.iter().map(|(_, w)| Constraint::Length(*w)))
            .header(header)
            .row_highlight_style(highlight(self.focus == Focus::Runs))
            .block(block.title(title));
        self.pages.0 = area.height.saturating_sub(3) as usize;
        f.render_stateful_widget(runs, area, &mut self.run_sel);
    }

    fn draw_tasks(&mut self, f: &mut ratatui::Frame, area: Rect) {
        let marks = self.detail.as_ref().map_or(&[][..], |d| &d.attention[..]);
        let tasks = self.tasks();
        let id_w = tasks.iter().map(|(_, t)| t.id.as_str().len()).max().unwrap_or(0).clamp(4, 24);
        let rows: Vec<Row> = tasks
            .into_iter()
            .map(|(w, t)| {
                let stalled = marks.iter().any(|m| m.task == t.id);
                Row::new([
                    t.id.to_string(),
                    format!("w{w}"),
                    t.facts.label(t.live_state).to_string(),
                    money(t.usage.as_ref()),
                    t.idle_s.flatten().map(|s| format!("{s:.0}s idle")).unwrap_or_default(),
                    if stalled { "stalled".to_string() } else { String::new() },
                    t.facts.detail.as_deref().unwrap_or("").chars().take(200).collect::<String>(),
                ])
            })
            .collect();
        let widths = [id_w as u16, 4, 18, 9, 10, 8].map(Constraint::Length).into_iter().chain([Constraint::Fill(1)]);
        let title = match &self.detail {
            Some(d) => format!(
                " {} · {}{} ",
                short_id(&d.run.run_id),
                d.run.status.label(),
                d.run.pause_detail.as_deref().map(|p| format!(" ({p})")).unwrap_or_default()
            ),
            None => " tasks ".into(),
        };
        let head = Row::new(["TASK", "WAVE", "STATE", "COST", "IDLE", "MARK", "DETAIL"]);
        let table = Table::new(rows, widths)
            .header(head.style(Style::default().add_modifier(Modifier::BOLD)))
            .row_highlight_style(highlight(self.focus == Focus::Tasks))
            .block(Block::default().borders(Borders::ALL).title(title));
        self.pages.1 = area.height.saturating_sub(3) as usize;
        f.render_stateful_widget(table, area, &mut self.task_sel);
    }

    fn draw_pane(&mut self, f: &mut ratatui::Frame, area: Rect) {
        let Some(open) = &mut self.pane else { return };
        let (width, h) = (area.width.saturating_sub(2) as usize, area.height.saturating_sub(2) as usize);
        let rows = open.pane.rows(width);
        let n = rows.len();
        let max_top = n.saturating_sub(h);
        let top = open.scroll.map_or(max_top, |t| t.min(max_top));
        open.drawn = (n, h);
        let shown: Vec<Line> = rows.into_iter().skip(top).take(h).collect();
        let end = if open.scroll.is_none() { "following the end" } else { "G follows the end" };
        let title =
            format!(" {} · {}-{} of {n} · {end} · esc closes ", open.pane.title(), (top + 1).min(n), top + shown.len());
        f.render_widget(Paragraph::new(shown).block(Block::default().borders(Borders::ALL).title(title)), area);
    }

    fn draw_footer(&self, f: &mut ratatui::Frame, area: Rect) {
        let task = self.selected_task().unwrap_or_default();
        let prompt = match &self.asking {
            Some((Asking::Steer, t)) => format!("steer {task}: {t}_  (enter sends, esc cancels)"),
            Some((Asking::Skip, t)) => format!("skip {task} — why? {t}_  (enter skips, esc cancels)"),
            Some((Asking::Budget, t)) => format!("budget of the run in US dollars: {t}_  (enter sets, esc cancels)"),
            Some((Asking::Kill, _)) => format!("kill {task}? y/n"),
            Some((Asking::Filter, t)) => format!("/{t}_  (runs whose id holds it; enter keeps, esc clears)"),
            None => self.status.clone(),
        };
        let second = match &self.link {
            Link::Down { why, since } => Line::styled(
                format!(
                    "disconnected — retrying every {}s ({}s so far): {why}",
                    RETRY_TICK.as_secs(),
                    since.elapsed().as_secs()
                ),
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
            Link::Up => {
                Line::styled("? keys · / filter · enter events · d diff · q quit", Style::default().fg(Color::DarkGray))
            }
        };
        f.render_widget(Paragraph::new(vec![Line::raw(prompt), second]), area);
    }
}

/// The selected row's look: reversed in the table that has the focus, bold in the other.
fn highlight(focused: bool) -> Style {
    Style::default().add_modifier(if focused { Modifier::REVERSED } else { Modifier::BOLD })
}

/// `?`: the keys, in a box over the middle of the screen.
fn draw_help(f: &mut ratatui::Frame, area: Rect) {
    let key_w = KEYS.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!(" {k:<key_w$}  "), Style::default().add_modifier(Modifier::BOLD)),
                Span::raw(*what),
            ])
        })
        .collect();
    let w = (lines.iter().map(Line::width).max().unwrap_or(0) as u16 + 3).min(area.width);
    let h = (lines.len() as u16 + 2).min(area.height);
    let box_ = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    f.render_widget(Clear, box_);
    let block = Block::default().borders(Borders::ALL).title(" keys · esc closes ");
    f.render_widget(Paragraph::new(lines).block(block), box_);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_gets_its_width_first_and_the_last_column_the_rest() {
        let cols = fit_columns(78, 17);
        assert_eq!(cols[0], (Col::Run, 17));
        assert_eq!(cols.iter().map(|(_, w)| w).sum::<u16>() + cols.len() as u16 - 1, 78, "{cols:?}");
        assert!(!cols.iter().any(|(c, _)| *c == Col::Paused), "a pause's reason gives way first: {cols:?}");
        assert_eq!(fit_columns(10, 17), vec![(Col::Run, 10)]);
        assert_eq!(fit_columns(200, 17).len(), 7);
    }

    #[test]
    fn motions_stay_inside_the_list() {
        assert_eq!(Motion::Up.apply(0, 5, 3), 0);
        assert_eq!(Motion::Down.apply(4, 5, 3), 4);
        assert_eq!(Motion::PageDown.apply(1, 5, 3), 4);
        assert_eq!(Motion::PageUp.apply(4, 5, 3), 1);
        assert_eq!((Motion::First.apply(3, 5, 3), Motion::Last.apply(0, 5, 3)), (0, 4));
    }

    #[test]
    fn a_run_reads_by_its_slug_and_a_short_hash() {
        assert_eq!(short_id(&RunId::parse("51bf6a52b5de--many").unwrap()), "many·51bf");
        assert_eq!(wrap("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(wrap("", 3), [""]);
    }
}
