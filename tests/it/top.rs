//! `harness top` in a real pseudo-terminal (util-linux `script`), read back through a small terminal
//! emulator so a test sees the screen a person would — rows of cells — not a stream of escape
//! codes. It shows the runs (live, blocked and paused first; by slug with a short hash) and tasks,
//! redraws when a journal changes, says when the API is down and stops saying it when the API is
//! back, and its keys act: move (`j k g G` PgUp PgDn Home End), filter (`/`), help (`?`), Esc that
//! closes and never quits, a task's events (Enter, as `harness watch` prints them) and diff (`d`),
//! pause (`p`), kill (`x`, `y`), retry (`r`), skip (`S`), budget (`b`), quit (`q`). `--once` prints
//! one frame as plain text (`tests/it/budget.rs`).

use crate::common::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// False (and says why) where there is no `script(1)`; under CI it must be there.
fn have_script() -> bool {
    if Command::new("script").arg("--version").output().is_ok() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "script (util-linux) is required under CI");
    eprintln!("SKIPPED: no script(1) for a pseudo-terminal");
    false
}

/// `harness top --api 127.0.0.1:PORT` in a pseudo-terminal of `cols`×`rows`, and all it wrote.
struct Tty {
    child: Child,
    keys: ChildStdin,
    out: Arc<Mutex<Vec<u8>>>,
    cols: usize,
    rows: usize,
}

impl Tty {
    fn start(home: &Path, port: u16, cols: usize, rows: usize) -> Tty {
        let cmd = format!("stty cols {cols} rows {rows}; exec {} top --api 127.0.0.1:{port}", bin().display());
        let mut child = Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .env("HARNESS_HOME", home)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1)");
        let out: Arc<Mutex<Vec<u8>>> = Default::default();
        let (mut from, to) = (child.stdout.take().unwrap(), out.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                to.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let keys = child.stdin.take().unwrap();
        Tty { child, keys, out, cols, rows }
    }

    /// Types `k` and gives the dashboard a moment to read it (an Esc must arrive alone, or it
    /// would read as the start of a longer key).
    fn press(&mut self, k: &str) {
        self.keys.write_all(k.as_bytes()).unwrap();
        self.keys.flush().unwrap();
        std::thread::sleep(Duration::from_millis(250));
    }

    /// The screen now, a string per row.
    fn screen(&self) -> Vec<String> {
        emulate(&self.out.lock().unwrap(), self.cols, self.rows)
    }

    /// Waits until the screen shows `what`; the screen then.
    fn wait_shown(&self, what: &str) -> Vec<String> {
        self.wait_until(&format!("show {what:?}"), |s| s.iter().any(|r| r.contains(what)))
    }

    /// Waits until the screen no longer shows `what`; the screen then.
    fn wait_gone(&self, what: &str) -> Vec<String> {
        self.wait_until(&format!("stop showing {what:?}"), |s| !s.iter().any(|r| r.contains(what)))
    }

    fn wait_until(&self, what: &str, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
        wait_for(T, || Some(self.screen()).filter(|s| ok(s)))
            .unwrap_or_else(|| panic!("the screen did not {what}:\n{}", self.screen().join("\n")))
    }

    /// Still running (a key that must not quit did not).
    fn assert_running(&mut self) {
        std::thread::sleep(Duration::from_millis(300));
        assert!(self.child.try_wait().unwrap().is_none(), "top quit:\n{}", self.screen().join("\n"));
    }

    /// Presses `q` and waits for a clean exit.
    fn quit(mut self) {
        self.press("q");
        let status = wait_for(T, || self.child.try_wait().unwrap()).expect("top quits on q");
        assert!(status.success(), "{status:?}");
    }
}

impl Drop for Tty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a terminal of `cols`×`rows` shows after `bytes`: enough of a VT100 for what ratatui and
/// crossterm send (cursor moves, erases, the alternate screen; colours and modes are ignored).
fn emulate(bytes: &[u8], cols: usize, rows: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut grid = vec![vec![' '; cols]; rows];
    let (mut x, mut y) = (0usize, 0usize);
    let mut it = text.chars();
    while let Some(c) = it.next() {
        match c {
            '\x1b' => match it.next() {
                Some('[') => {
                    let mut params = String::new();
                    let mut fin = ' ';
                    for d in it.by_ref() {
                        if ('\x40'..='\x7e').contains(&d) {
                            fin = d;
                            break;
                        }
                        params.push(d);
                    }
                    csi(&mut grid, (&mut x, &mut y), &params, fin);
                }
                Some(']') => {
                    while let Some(d) = it.next() {
                        if d == '\x07' || (d == '\x1b' && it.next().is_some()) {
                            break;
                        }
                    }
                }
                Some('(' | ')') => _ = it.next(),
                _ => {}
            },
            '\r' => x = 0,
            '\n' => y += 1,
            '\x08' => x = x.saturating_sub(1),
            c if c.is_control() => {}
            c => {
                if let Some(cell) = grid.get_mut(y).and_then(|r| r.get_mut(x)) {
                    *cell = c;
                }
                x += 1;
            }
        }
    }
    grid.into_iter().map(|r| r.into_iter().collect::<String>().trim_end().to_string()).collect()
}

/// One CSI sequence (`ESC [ params fin`) on the grid.
fn csi(grid: &mut [Vec<char>], (x, y): (&mut usize, &mut usize), params: &str, fin: char) {
    let nums: Vec<usize> = params.trim_start_matches('?').split(';').map(|p| p.parse().unwrap_or(0)).collect();
    let n = |i: usize, d: usize| nums.get(i).copied().filter(|&v| v > 0).unwrap_or(d);
    let clear = |row: &mut Vec<char>, from: usize| row.iter_mut().skip(from).for_each(|c| *c = ' ');
    match fin {
        'H' | 'f' => (*y, *x) = (n(0, 1) - 1, n(1, 1) - 1),
        'A' => *y = y.saturating_sub(n(0, 1)),
        'B' => *y += n(0, 1),
        'C' => *x += n(0, 1),
        'D' => *x = x.saturating_sub(n(0, 1)),
        'G' => *x = n(0, 1) - 1,
        'J' if nums[0] == 0 => {
            for (i, row) in grid.iter_mut().enumerate().skip(*y) {
                clear(row, if i == *y { *x } else { 0 });
            }
        }
        'J' => grid.iter_mut().for_each(|r| clear(r, 0)),
        'K' => {
            if let Some(row) = grid.get_mut(*y) {
                clear(row, if nums[0] == 0 { *x } else { 0 });
            }
        }
        // Entering or leaving the alternate screen: a blank one either way here.
        'h' | 'l' if params == "?1049" => grid.iter_mut().for_each(|r| clear(r, 0)),
        _ => {}
    }
}

#[test]
fn the_emulator_reads_cursor_moves_and_erases() {
    let s = emulate("\x1b[?1049h\x1b[2;3Hab\x1b[1mc\x1b[0m\x1b[1;1Hxyz\x1b[1;2H\x1b[K·".as_bytes(), 6, 2);
    assert_eq!(s, ["x·", "  abc"]);
}

/// A row of a bordered pane without its borders.
fn inner(row: &str) -> &str {
    row.trim_start_matches('│').trim_end().trim_end_matches('│').trim_end()
}

/// How top names a run: its slug and the first four digits of its hash.
fn short(run_id: &str) -> String {
    let (hash, slug) = run_id.split_once("--").unwrap();
    format!("{slug}·{}", &hash[..4])
}

/// The row of `screen` holding `what`.
fn row_of(screen: &[String], what: &str) -> usize {
    screen.iter().position(|r| r.contains(what)).unwrap_or_else(|| panic!("no {what:?} on:\n{}", screen.join("\n")))
}

/// A `harness api` on `port` (the port a killed one had: clients reconnect to the same address).
fn api_on(home: &Path, port: u16) -> ApiProc {
    let mut child = harness(home)
        .args(["api", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn harness api");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains(&format!(":{port}")), "the API did not listen on {port}: {line:?}");
    ApiProc { proc: Proc { child }, port }
}

#[test]
fn top_shows_runs_redraws_on_changes_and_its_keys_act() {
    if !have_script() {
        return;
    }
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"topped","tasks":[
        {"id":"H","wave":1,"adapter":"claude","prompt":"hang [fake-claude:hang]"},
        {"id":"Z","wave":2,"adapter":"claude","prompt":"later"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("H", "leased", T);
    let api = ApiProc::start(&b.home(), &[]);
    let run = b.run_id();
    let mut top = Tty::start(&b.home(), api.port, 160, 40);
    top.wait_shown(&short(&run));
    // The task's state in the words `show` and `runs` use, not the journal's.
    let s = top.wait_until("show H running", |s| s.iter().any(|r| r.contains(" w1 ") && r.contains(" running ")));
    assert!(!s.join("\n").contains("leased"), "{}", s.join("\n"));
    // p pauses the run; the change comes back through /watch and is drawn.
    top.press("p");
    wait_for(T, || b.controls("pause").iter().any(|c| c["by"] == "top").then_some(())).expect("paused by top");
    top.wait_shown("operator");
    // Tab to the tasks, x then y kills H.
    top.press("\t");
    top.press("x");
    top.wait_shown("kill H? y/n");
    top.press("y");
    b.wait_state("H", "halted", T);
    assert_eq!(b.view()["tasks"]["H"]["detail"], "killed by top");
    // b sets a budget.
    top.press("b");
    top.press("7.5\r");
    wait_for(T, || b.controls("budget").iter().any(|c| c["usd"] == 7.5 && c["by"] == "top").then_some(()))
        .expect("a budget by top");
    // Enter opens the selected task's events in a pane: H's, its killed turn's exit last; Esc
    // closes it.
    top.press("\r");
    top.wait_shown("rc=143");
    top.press("\x1b");
    top.wait_gone("rc=143");
    top.quit();
}

#[test]
fn top_puts_live_runs_first_names_them_by_slug_and_moves_filters_and_helps_by_key() {
    if !have_script() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let runs = install_fixture_runs(home.path());
    let id = |name: &str| run_id_of(&runs, name);
    let api = ApiProc::start(home.path(), &[]);
    // 80 columns: the slug gets its room before the other columns.
    let mut top = Tty::start(home.path(), api.port, 80, 20);
    // Running first, newest activity first; then the finished ones, newest first — the API lists the
    // finished same-slug-a first (its last record is the newest).
    let order = ["same-slug-b", "midwave", "dynwf", "same-slug-a", "finished"].map(|n| short(&id(n)));
    let s = top.wait_shown(&order[4]);
    let rows = order.clone().map(|o| row_of(&s, &format!("{o} ")));
    assert!(rows.is_sorted() && rows[0] < rows[4], "{order:?} at rows {rows:?}:\n{}", s.join("\n"));
    for (_, run) in &runs {
        assert!(!s.join("\n").contains(&run[..12]), "a whole hash on screen:\n{}", s.join("\n"));
    }
    // The tasks pane's title names the selected run: j/k, g/G, End/Home, PgDn/PgUp move it.
    let title = |name: &str, status: &str| format!("{} · {status}", short(&id(name)));
    top.wait_shown(&title("same-slug-b", "running"));
    for (key, name, status) in [
        ("j", "midwave", "running"),
        ("k", "same-slug-b", "running"),
        ("G", "finished", "done"),
        ("g", "same-slug-b", "running"),
        ("\x1b[F", "finished", "done"),
        ("\x1b[H", "same-slug-b", "running"),
        ("\x1b[6~", "finished", "done"),
        ("\x1b[5~", "same-slug-b", "running"),
    ] {
        top.press(key);
        top.wait_shown(&title(name, status));
    }
    // ? lists the keys, retry, skip and diff among them; Esc closes it, and Esc again quits nothing.
    top.press("?");
    top.wait_shown("retry the halted task");
    let s = top.wait_shown("skip the halted task (asks why)");
    row_of(&s, "the task's diff");
    top.press("\x1b");
    top.wait_gone("retry the halted task");
    top.press("\x1b");
    top.assert_running();
    // / filters as it is typed; Enter keeps the filter, Esc then clears it.
    top.press("/");
    top.press("shipp");
    top.wait_gone(&order[0]);
    top.press("\r");
    let s = top.wait_shown("1 of 5 run(s)");
    row_of(&s, &format!("{} ", order[4]));
    top.press("\x1b");
    top.wait_shown(&order[0]);
    top.wait_shown(" 5 run(s)");
    // Esc while typing a filter clears it too.
    top.press("/");
    top.press("payments");
    top.wait_gone(&order[0]);
    top.press("\x1b");
    top.wait_shown(&order[0]);
    top.assert_running();
    top.quit();
}

#[test]
fn enter_on_a_finished_task_shows_its_recorded_events_as_watch_prints_them() {
    if !have_script() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let runs = install_fixture_runs(home.path());
    let run = run_id_of(&runs, "finished");
    let api = ApiProc::start(home.path(), &[]);
    let (code, watched, err) = cli(home.path(), &["watch", "--api", &format!("127.0.0.1:{}", api.port), &run, "T1"]);
    assert_eq!(code, 0, "{err}");
    let mut top = Tty::start(home.path(), api.port, 80, 20);
    top.wait_shown(&short(&run));
    // The finished run is last; its first task's events (the run is over: no live stream).
    top.press("G");
    top.press("\t");
    top.press("\r");
    let tail = top.wait_shown("(ended: task T1 was committed");
    // The pane is shorter than the transcript: Home shows its start, End its end again.
    assert!(!tail.iter().any(|r| r.contains("── turn start")), "the pane follows the end:\n{}", tail.join("\n"));
    top.press("\x1b[H");
    let head = top.wait_shown("── turn start");
    let first = head.iter().position(|r| r.contains("── turn start")).unwrap();
    // j scrolls one row, k back.
    top.press("j");
    top.wait_until("scroll a row down", |s| !s[first].contains("── turn start"));
    top.press("k");
    top.wait_until("scroll a row up", |s| s[first].contains("── turn start"));
    // The lines are `harness watch`'s: deltas joined on one line, a line per tool call and result.
    let width = 78;
    let shown: Vec<&str> = head.iter().chain(&tail).map(|r| inner(r)).collect();
    for line in watched.lines() {
        let want: String = line.chars().take(width).collect();
        assert!(shown.contains(&want.as_str()), "{want:?} is not a row of the pane:\n{}", shown.join("\n"));
    }
    assert!(shown.contains(&"I'll run a command."), "{shown:?}");
    top.press("\x1b[F");
    top.wait_gone("── turn start");
    // PgUp / PgDn page through it.
    top.press("\x1b[5~");
    top.wait_shown("── turn start");
    top.press("\x1b[6~");
    top.wait_gone("── turn start");
    // Esc closes the pane (the tasks are back), and does not quit.
    top.press("\x1b");
    top.wait_gone("I'll run a command.");
    let s = top.wait_shown("TASK");
    // The task's state in the words `show` uses ("done", not the journal's "committed").
    let t1 = &s[row_of(&s, "T1 ")];
    assert!(t1.contains(" done ") && !t1.contains("committed"), "{t1}");
    // r on a run that is over says so as the CLI's verbs do, not as the API's 409.
    top.press("r");
    let s = top.wait_shown(&format!("run {run} finished"));
    assert!(!s.join("\n").contains("409"), "{}", s.join("\n"));
    top.assert_running();
    top.quit();
}

#[test]
fn top_says_it_is_disconnected_while_the_api_is_down_and_stops_when_it_is_back() {
    if !have_script() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let runs = install_fixture_runs(home.path());
    let api = ApiProc::start(home.path(), &[]);
    let port = api.port;
    let mut top = Tty::start(home.path(), port, 120, 30);
    let shipped = short(&run_id_of(&runs, "finished"));
    top.wait_shown(&shipped);
    top.wait_gone("disconnected");
    drop(api);
    top.wait_shown("disconnected — retrying");
    // What it showed last stays on screen; a verb sent meanwhile says it was not sent.
    top.press("p");
    let s = top.wait_shown("not sent: cannot reach the API");
    row_of(&s, &shipped);
    let _api = api_on(home.path(), port);
    top.wait_gone("disconnected");
    top.wait_gone("cannot reach the API");
    top.wait_shown("reconnected");
    top.wait_shown(&shipped);
    top.quit();
}

#[test]
fn retry_skip_and_diff_keys_act_on_the_selected_task() {
    if !have_script() {
        return;
    }
    let b = Bench::new();
    let plan = json!({"v":"plan/v1","slug":"mended","tasks":[
        {"id":"A","wave":1,"adapter":"claude","prompt":"a [fake-write:a.txt] [fake-claude:error]"},
        {"id":"Z","wave":2,"adapter":"claude","prompt":"z [fake-write:z.txt]"}]});
    let _sup = b.start_supervised(&plan.to_string(), "success", &[]);
    b.wait_state("A", "halted", T);
    let api = ApiProc::start(&b.home(), &[]);
    let mut top = Tty::start(&b.home(), api.port, 160, 40);
    top.wait_shown("blocked by A");
    // r retries A (its prompt fails it again).
    top.press("\t");
    top.press("r");
    wait_for(T, || b.controls("retry").iter().any(|c| c["by"] == "top" && c["outcome"] == "accepted").then_some(()))
        .expect("a retry by top");
    wait_for(T, || {
        let a = &b.view()["tasks"]["A"];
        (a["state"] == "halted" && a["attempts"] == 2).then_some(())
    })
    .expect("A ran again and halted");
    // S asks why, then skips A; the run goes on to Z.
    top.press("S");
    top.wait_shown("skip A — why?");
    top.press("not needed today\r");
    b.wait_state("A", "skipped", T);
    assert_eq!(b.view()["tasks"]["A"]["detail"], "skipped by top: not needed today");
    b.wait_state("Z", "committed", T);
    // d shows Z's diff in a pane that scrolls; Esc closes it.
    top.press("j");
    top.press("d");
    top.wait_shown("+++ b/z.txt");
    top.wait_shown("Z · diff");
    top.press("G");
    top.press("\x1b");
    top.wait_gone("+++ b/z.txt");
    top.assert_running();
    top.quit();
}
