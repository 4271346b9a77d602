#!/usr/bin/env bash
# Runs inside a private mount namespace (tests/it/faults.rs): the run's runstate directory is a tiny
# tmpfs. Checks that a verb is refused with a clear error when the journal cannot be appended to (disk
# full), that nothing acknowledged is lost, and that a read-only runstate is a clear error.
# env: HARNESS_BIN, REPO, WORK. Prints "ok <what>" per step, "FAIL <why>" and exit 1 else.
set -uo pipefail
: "${HARNESS_BIN:?}" "${REPO:?}" "${WORK:?}"
say() { printf 'ok %s\n' "$*"; }
fail() {
  printf 'FAIL %s\n' "$*"
  exit 1
}
wait_until() {
  local n=$(($1 * 20))
  shift
  for _ in $(seq "$n"); do "$@" > /dev/null 2>&1 && return 0; sleep 0.05; done
  return 1
}
export HARNESS_HOME="$WORK/home" HARNESS_CLAUDE_BIN="$REPO/fixtures/engines/fake-claude" HARNESS_WRAPPERS="$REPO/wrappers"
export HARNESS_FAKE_SCENARIO=hang HARNESS_FAKE_PACE=fast
repo="$WORK/repo"
mkdir -p "$repo/runstate"
git -C "$repo" init -q -b main && echo x > "$repo/R" && git -C "$repo" add R && git -C "$repo" -c user.name=t -c user.email=t@t commit -qm i
mount -t tmpfs -o size=512k tmpfs "$repo/runstate" || fail "cannot mount a tmpfs"
echo '{"v":"plan/v1","slug":"full","tasks":[{"id":"A","wave":1,"adapter":"claude","prompt":"x"}]}' > "$WORK/plan.json"
(cd "$repo" && exec "$HARNESS_BIN" run "$WORK/plan.json" --supervised --foreground > "$WORK/sup.log" 2>&1) &
wait_until 20 grep -q '"state":"leased"' "$repo/runstate/full.jsonl" || fail "the run did not start: $(cat "$WORK/sup.log")"
for f in "$HARNESS_HOME"/runs/*.json; do run=$(basename "$f" .json); done
"$HARNESS_BIN" api --listen 127.0.0.1:0 > "$WORK/api.out" 2> "$WORK/api.err" &
wait_until 10 grep -q listening "$WORK/api.out" || fail "api"
port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/api.out" | head -n 1)
# A message longer than a page: on tmpfs a small record could still fit in the journal's last
# partly used page after the disk is full; this one needs new space.
pad=$(head -c 10000 /dev/zero | tr '\0' 'p')
steer() {
  curl -s --max-time 30 -o "$WORK/resp" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d "{\"msg\":\"$1 $pad\"}" "http://127.0.0.1:$port/runs/$run/tasks/A/steer"
}
[ "$(steer before)" = 200 ] || fail "steer before the disk filled: $(cat "$WORK/resp")"
lines_before=$(wc -l < "$repo/runstate/full.jsonl")
dd if=/dev/zero of="$repo/runstate/filler" bs=4k > /dev/null 2>&1
code=$(steer during)
[ "$code" = 500 ] || fail "steer on a full disk answered $code: $(cat "$WORK/resp")"
grep -q 'journal append failed, nothing was' "$WORK/resp" || fail "unclear error: $(cat "$WORK/resp")"
say "disk full: the steer was refused 500 with: $(jq -r .detail "$WORK/resp")"
[ "$(wc -l < "$repo/runstate/full.jsonl")" = "$lines_before" ] || fail "the journal changed on a refused verb"
show=$("$HARNESS_BIN" journal show "$run") || fail "journal show"
if [ "$(printf '%s' "$show" | jq '.bad_lines | length')" != 0 ] || [ "$(printf '%s' "$show" | jq '.torn_tail')" != null ]; then
  fail "the journal has torn or bad lines: $show"
fi
printf '%s' "$show" | jq -e '[.pending_steers[] | select(.msg | startswith("before "))] | length == 1' > /dev/null || fail "the acknowledged steer is not in the journal"
say "nothing acknowledged was lost: the earlier steer is queued, no torn or bad line"
rm -f "$repo/runstate/filler"
[ "$(steer after)" = 200 ] || fail "steer after freeing space: $(cat "$WORK/resp")"
say "after freeing space the same verb is accepted"

# Read-only runstate: a clear error naming the path (a run of its own, so nothing holds it open).
ro="$WORK/ro-repo"
mkdir -p "$ro/runstate"
git -C "$ro" init -q -b main
mount -t tmpfs -o size=64k tmpfs "$ro/runstate" || fail "cannot mount a second tmpfs"
ro_run=$("$HARNESS_BIN" registry add --repo "$ro" --slug ro | jq -r .runId) || fail "registry add"
mount -o remount,ro "$ro/runstate" || fail "remount ro"
out=$("$HARNESS_BIN" journal append "$ro_run" '{"kind":"run","event":"started","by":"t"}' 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "append on a read-only runstate exited $rc: $out"
if ! printf '%s' "$out" | grep -q "ro.jsonl" || ! printf '%s' "$out" | grep -qi "read-only"; then
  fail "unclear error: $out"
fi
say "read-only runstate: exit 1 with: $out"
exit 0
