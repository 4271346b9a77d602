#!/usr/bin/env bash
# Runs inside a private mount + pid namespace (tests/it/systemd.rs starts it with unshare): a hermetic
# systemd user manager and journald, the harness units installed by `harness install`, then the
# scenarios of the OS-integration issue. Prints "ok <what>" per step; "FAIL <why>" and exit 1 else.
#
# env: HARNESS_BIN (the binary), REPO (the source tree: fixtures, wrappers), WORK (a scratch dir)
set -uo pipefail
: "${HARNESS_BIN:?}" "${REPO:?}" "${WORK:?}"
say() { printf 'ok %s\n' "$*"; }
fail() {
  printf 'FAIL %s\n' "$*"
  [ -f "$WORK/manager.log" ] && tail -n 20 "$WORK/manager.log" | sed 's/^/  manager: /'
  exit 1
}
wait_until() { # seconds, command...
  local n=$(($1 * 20))
  shift
  for _ in $(seq "$n"); do "$@" > /dev/null 2>&1 && return 0; sleep 0.05; done
  return 1
}

# Own cgroups, a fake booted system, journald.
name="harness-test-$$"
for c in unified systemd; do
  if [ -d "/sys/fs/cgroup/$c" ]; then
    mkdir -p "/sys/fs/cgroup/$c/$name"
    echo $$ > "/sys/fs/cgroup/$c/$name/cgroup.procs"
  fi
done
mkdir -p /run/systemd /run/log /var/log/journal
mount -t tmpfs tmpfs /run/systemd || fail "cannot mount tmpfs on /run/systemd"
mount -t tmpfs tmpfs /run/log
mount -t tmpfs tmpfs /var/log/journal
mkdir -p /run/systemd/system /run/systemd/journal
/lib/systemd/systemd-journald > "$WORK/journald.log" 2>&1 &
wait_until 5 test -S /run/systemd/journal/socket || fail "journald did not start"
say "journald up"

export HOME="$WORK/home" XDG_RUNTIME_DIR="$WORK/xdg" HARNESS_HOME="$WORK/home/.harness"
mkdir -p "$HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
units="$WORK/units"
mkdir -p "$units"
for u in default.target basic.target sockets.target timers.target paths.target shutdown.target exit.target systemd-exit.service app.slice; do
  cp "/usr/lib/systemd/user/$u" "$units/"
done
"$HARNESS_BIN" install --user --unit-dir "$units" --bin "$HARNESS_BIN" > /dev/null || fail "harness install"
export SYSTEMD_UNIT_PATH="$units"
/usr/lib/systemd/systemd --user > "$WORK/manager.log" 2>&1 &
wait_until 10 systemctl --user show-environment || fail "the user manager did not answer"
say "user manager up"

# The API: socket first, the first connection activates the service.
"$REPO/fixtures/runs/setup.sh" "$HARNESS_HOME" "$HARNESS_BIN" > /dev/null || fail "fixture runs"
systemctl --user start harness-api.socket || fail "start harness-api.socket"
[ "$(systemctl --user show -p ActiveState --value harness-api.service)" = inactive ] || fail "the API started before any connection"
runs=$(curl -s --max-time 10 http://127.0.0.1:7878/runs) || fail "GET /runs over TCP"
[ "$(printf '%s' "$runs" | jq length)" = 5 ] || fail "GET /runs over TCP: $runs"
[ "$(systemctl --user show -p ActiveState --value harness-api.service)" = active ] || fail "the API was not activated"
runs=$(curl -s --max-time 10 --unix-socket "$HARNESS_HOME/sock/api.sock" http://localhost/runs) || fail "GET /runs over Unix"
[ "$(printf '%s' "$runs" | jq length)" = 5 ] || fail "GET /runs over Unix: $runs"
say "harness-api.socket activated harness-api.service; GET /runs answered over TCP and the Unix socket (5 runs)"

# A supervised run: harness run starts harness-supervisor@<runId> through systemd.
repo="$WORK/repo"
mkdir -p "$repo"
if ! { git -C "$repo" init -q -b main && echo x > "$repo/R" && git -C "$repo" add R &&
  git -C "$repo" -c user.name=t -c user.email=t@t commit -qm init; }; then
  fail "git repo"
fi
cat > "$WORK/plan.json" << 'PLAN'
{"v":"plan/v1","slug":"sysd","max_parallel":2,"tasks":[
 {"id":"A1","wave":1,"adapter":"claude","prompt":"a1 [fake-write:a1.txt]"},{"id":"A2","wave":1,"adapter":"claude","prompt":"a2 [fake-write:a2.txt]"},
 {"id":"B1","wave":2,"adapter":"claude","prompt":"b1 [fake-write:b1.txt]"},{"id":"B2","wave":2,"adapter":"claude","prompt":"b2 [fake-write:b2.txt]"}]}
PLAN
export HARNESS_CLAUDE_BIN="$REPO/fixtures/engines/fake-claude" HARNESS_WRAPPERS="$REPO/wrappers"
export HARNESS_FAKE_SCENARIO=slow HARNESS_FAKE_SLOW_PACE=0.15 HARNESS_FAKE_PACE=fast
out=$(cd "$repo" && "$HARNESS_BIN" run "$WORK/plan.json" --supervised 2>&1) || fail "harness run: $out"
printf '%s' "$out" | grep -q "systemd unit harness-supervisor@" || fail "not started through systemd: $out"
run=$(printf '%s' "$out" | sed -n 's/^run \([^ ]*\) started.*/\1/p')
unit="harness-supervisor@$run.service"
journal="$repo/runstate/sysd.jsonl"
wait_until 20 grep -q '"state":"leased"' "$journal" || fail "no task leased"
say "harness run --supervised started $unit"

# Watch a task live through the API while the API is killed: the client reconnects with
# Last-Event-ID (harness watch does it by itself) and the seq list is exact.
"$HARNESS_BIN" watch "$run" A1 --json --until-exit > "$WORK/watch.jsonl" 2> "$WORK/watch.err" &
watcher=$!
wait_until 10 test -s "$WORK/watch.jsonl" || fail "the watcher got nothing"
api_pid=$(systemctl --user show -p MainPID --value harness-api.service)
kill -9 "$api_pid"
wait_until 10 test -S "$HARNESS_HOME/sock/api.sock" || fail "the API socket disappeared"
[ "$(systemctl --user show -p ActiveState --value harness-api.socket)" = active ] || fail "harness-api.socket is not active after the kill"
wait "$watcher" || fail "harness watch failed: $(cat "$WORK/watch.err")"
got=$(jq -r '.seq' "$WORK/watch.jsonl" | tr '\n' ' ')
want=$(curl -s --max-time 10 "http://127.0.0.1:7878/runs/$run/tasks/A1/events?limit=5000" | jq -r '.seq' | tr '\n' ' ')
if [ -z "$want" ] || [ "$got" != "$want" ]; then
  fail "after the API kill the stream was not exact: got [$got] want [$want]"
fi
say "kill -9 of the API mid-stream: the socket stayed, the client resumed with Last-Event-ID, $(printf '%s' "$got" | wc -w) events exact"

# kill -9 of the supervisor: systemd restarts it and the run completes, each task committed once.
wait_until 20 grep -q '"task":"B1","state":"leased"' "$journal" || fail "wave 2 never started"
main=$(systemctl --user show -p MainPID --value "$unit")
[ "$main" -gt 0 ] || fail "no MainPID for $unit"
kill -9 "$main"
# shellcheck disable=SC2317,SC2329 # called through wait_until
journal_has_verb() { journalctl --no-pager -o cat "RUN_ID=$run" "TASK=A1" "VERB=kill" 2> /dev/null | grep -q verb; }
# shellcheck disable=SC2317,SC2329 # called through wait_until
restarted_once() { [ "$(systemctl --user show -p NRestarts --value "$unit")" = 1 ]; }
wait_until 15 restarted_once || fail "NRestarts is $(systemctl --user show -p NRestarts --value "$unit")"
say "kill -9 of the supervisor: systemd restarted $unit (NRestarts=1)"
if ! wait_until 60 grep -q '"event":"finished"' "$journal"; then
  # Everything needed to tell why, before failing.
  tail -n 12 "$journal" | sed 's/^/  journal: /'
  journalctl --no-pager -o short-monotonic --user-unit "$unit" 2> /dev/null | tail -n 40 | sed 's/^/  unit: /'
  journalctl --no-pager -o cat "RUN_ID=$run" 2> /dev/null | tail -n 20 | sed 's/^/  RUN_ID: /'
  ps -eo pid,pgid,stat,etimes,args 2> /dev/null | sed 's/^/  ps: /'
  git -C "$repo" worktree list 2> /dev/null | sed 's/^/  worktree: /'
  git -C "$repo" log --oneline -n 6 --all 2> /dev/null | sed 's/^/  git: /'
  fail "the run did not finish: $(tail -n 3 "$journal")"
fi
for t in A1 A2 B1 B2; do
  n=$(git -C "$repo" log --format=%H --all-match --grep="^Harness-Run: $run\$" --grep="^Harness-Task: $t\$" | wc -l)
  [ "$n" = 1 ] || fail "task $t committed $n times"
done
say "the run finished; every task committed exactly once"

# journald holds the run's story under RUN_ID.
n=$(journalctl --no-pager -o cat "RUN_ID=$run" 2> /dev/null | wc -l)
[ "$n" -gt 5 ] || fail "journalctl RUN_ID=$run shows $n lines"
journalctl --no-pager -o cat "RUN_ID=$run" | grep -q "task state" || fail "no task state records in the journal"
say "journalctl RUN_ID=$run shows $n records (from $unit)"

# Fields are plain strings: a verb's line is found by its task and verb (the run is over: a 409).
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST -H 'Content-Type: application/json' -d '{}' \
  "http://127.0.0.1:7878/runs/$run/tasks/A1/kill")
[ "$code" = 409 ] || fail "kill of a finished run's task answered $code"
wait_until 10 journal_has_verb || fail "journalctl RUN_ID=$run TASK=A1 VERB=kill finds nothing"
say "journalctl TASK=A1 RUN_ID=$run VERB=kill finds the verb's line"

# Another home: `harness install` renders its own units (harness-<home id>-…) beside the default
# home's, and `harness run --supervised` in it goes through them — never a unit of another home.
custom="$WORK/custom-home"
HARNESS_HOME="$custom" "$HARNESS_BIN" install --user --unit-dir "$units" --bin "$HARNESS_BIN" > "$WORK/install2.out" || fail "harness install for $custom"
systemctl --user daemon-reload || fail "daemon-reload"
prefix=$(find "$units" -maxdepth 1 -name 'harness-*-supervisor@.service' -printf '%f\n' | sed -n 's/^\(harness-[0-9a-f]\{16\}\)-supervisor@\.service$/\1/p')
[ -n "$prefix" ] || fail "no harness-<id>-supervisor@.service for $custom: $(ls "$units")"
[ -f "$units/harness-supervisor@.service" ] || fail "the default home's units were replaced"
grep -q "^Environment=HARNESS_HOME=$custom\$" "$units/$prefix-supervisor@.service" || fail "$prefix units do not serve $custom"
if grep -q '^ListenStream=127.0.0.1' "$units/$prefix-api.socket"; then fail "$prefix-api.socket takes the default home's TCP port"; fi
plan2() { # slug
  printf '{"v":"plan/v1","slug":"%s","tasks":[{"id":"C1","wave":1,"adapter":"claude","prompt":"c1 [fake-write:c1.txt]"}]}\n' "$1"
}
for r in repo2 repo3; do
  if ! { mkdir -p "$WORK/$r" && git -C "$WORK/$r" init -q -b main && echo x > "$WORK/$r/R" && git -C "$WORK/$r" add R &&
    git -C "$WORK/$r" -c user.name=t -c user.email=t@t commit -qm init; }; then
    fail "git $r"
  fi
done
plan2 other > "$WORK/plan2.json"
out=$(cd "$WORK/repo2" && HARNESS_HOME="$custom" "$HARNESS_BIN" run "$WORK/plan2.json" --supervised 2>&1) || fail "harness run in $custom: $out"
printf '%s' "$out" | grep -q "systemd unit $prefix-supervisor@" || fail "not started through $prefix units: $out"
run2=$(printf '%s' "$out" | sed -n 's/^run \([^ ]*\) started.*/\1/p')
wait_until 60 grep -q '"event":"finished"' "$WORK/repo2/runstate/other.jsonl" || fail "the run in $custom did not finish: $(tail -n 3 "$WORK/repo2/runstate/other.jsonl")"
systemctl --user show -p Environment --value "$prefix-supervisor@$run2.service" | grep -q "HARNESS_HOME=$custom" || fail "the unit's home is not $custom"
say "another home's run went through its own units $prefix-supervisor@$run2 (HARNESS_HOME=$custom) and finished"

# A home with no units of its own: supervised detached, saying why.
third="$WORK/third-home"
plan2 third > "$WORK/plan3.json"
out=$(cd "$WORK/repo3" && HARNESS_HOME="$third" "$HARNESS_BIN" run "$WORK/plan3.json" --supervised 2>&1) || fail "harness run in $third: $out"
printf '%s' "$out" | grep -q "detached: the systemd units serve the default home, not $third" || fail "no reason said: $out"
wait_until 60 grep -q '"event":"finished"' "$WORK/repo3/runstate/third.jsonl" || fail "the run in $third did not finish"
say "a home without units of its own is supervised detached, saying why, and its run finished"

systemctl --user stop harness-api.socket harness-api.service > /dev/null 2>&1
kill "$(systemctl --user show -p MainPID --value init.scope 2> /dev/null || echo 0)" 2> /dev/null
exit 0
