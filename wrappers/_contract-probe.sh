#!/usr/bin/env bash
# _contract-probe.sh — checks each wrapper against the contract (spec/WRAPPER-CONTRACT.md) using its
# fake engine: status line shape, session_id present on completion, exit codes, log appended (never
# truncated) with an exit marker per turn, timeout, missing engine, usage errors.
# With HARNESS_PROBE_REAL=1 it also runs the real CLIs (HARNESS_CLAUDE_BIN / HARNESS_CODEX_BIN /
# HARNESS_CURSOR_BIN as given on entry, else claude / codex / cursor-agent on PATH), which then must
# reach a model: a turn, a resumed turn with the same session, the log appended with one exit marker
# per turn. With HARNESS_PROBE_STANDIN=1 as well, the model is the test suite's stand-in
# (tests/it/common/standin.rs), scripted by directives in the prompt: an HTTP error must exit 3 and a
# stream slower than --timeout must exit 124, from the real CLI.
#
# usage: wrappers/_contract-probe.sh [na.sh|ca.sh|codex.sh ...]     (needs jq)
# The checks are single-quoted strings evaluated later, on purpose.
# shellcheck disable=SC2016,SC2034
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
engines=$(cd "$here/../fixtures/engines" && pwd)
command -v jq > /dev/null || { echo "probe: jq is required" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0 checks=0
# The real CLIs, as given on entry (the fake-engine probes below override these variables).
real_claude=${HARNESS_CLAUDE_BIN:-claude}
real_codex=${HARNESS_CODEX_BIN:-codex}
real_cursor=${HARNESS_CURSOR_BIN:-cursor-agent}

ok() { checks=$((checks + 1)); printf '  ok   %s\n' "$1"; }
bad() { checks=$((checks + 1)); failures=$((failures + 1)); printf '  FAIL %s\n' "$1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

# run WRAPPER LOG [args...]: runs one turn; sets RC and STATUS (last stdout line).
run() {
  local w=$1 log=$2
  shift 2
  STATUS=$("$here/$w" --prompt-file "$work/prompt" --cwd "$work/repo" --log "$log" "$@" 2> "$work/stderr" | tail -n 1)
  RC=${PIPESTATUS[0]}
}
status_shape() {
  printf '%s' "$STATUS" | jq -e 'type == "object" and (.ok | type == "boolean") and (.detail | type == "string")
    and (.files | type == "array") and ((.session_id // "") | type == "string")' > /dev/null 2>&1
}
last_marker_rc() { tail -n 1 "$1" | jq -r 'select(.harness == "exit") | .rc' 2> /dev/null; }

probe() {
  local w=$1 bin_var=$2 fake=$3 resume_flag=$4 sid log
  echo "$w (fake engine $fake)"
  export "$bin_var=$engines/$fake"
  export HARNESS_FAKE_PACE=fast HARNESS_KILL_GRACE=1
  log="$work/$w.log"
  rm -f "$log" "$log.stderr"
  unset HARNESS_FAKE_SCENARIO
  [ "$w" = codex.sh ] && export HARNESS_FAKE_SCENARIO=approve
  local first=()
  [ "$w" = na.sh ] && first=(--session-id "$(cat /proc/sys/kernel/random/uuid)")
  run "$w" "$log" --timeout 30 "${first[@]}"
  check "completes with exit 0" '[ "$RC" = 0 ]'
  check "status line has the contract shape" status_shape
  sid=$(printf '%s' "$STATUS" | jq -r '.session_id // empty' 2> /dev/null)
  check "session_id present on completion" '[ -n "$sid" ]'
  check "exit marker rc 0 appended to the log" '[ "$(last_marker_rc "$log")" = 0 ]'
  local size1 sum1
  size1=$(wc -c < "$log")
  sum1=$(cksum < "$log")
  run "$w" "$log" --timeout 30 "$resume_flag" "$sid"
  check "resumed turn completes with the same session" '[ "$RC" = 0 ] && [ "$(printf "%s" "$STATUS" | jq -r .session_id)" = "$sid" ]'
  check "log appended, not truncated (first turn intact)" '[ "$(head -c "$size1" "$log" | cksum)" = "$sum1" ] && [ "$(wc -c < "$log")" -gt "$size1" ]'
  check "one exit marker per turn" '[ "$(grep -c "^{\"harness\":\"exit\"" "$log")" = 2 ]'
  export HARNESS_FAKE_SCENARIO=error
  run "$w" "$log" --timeout 30
  check "engine error exits 3 with ok:false" '[ "$RC" = 3 ] && [ "$(printf "%s" "$STATUS" | jq -r .ok)" = false ]'
  export HARNESS_FAKE_SCENARIO=hang
  local t0=$SECONDS
  run "$w" "$log" --timeout 1
  check "timeout exits 124 within timeout + 2 s" '[ "$RC" = 124 ] && [ $((SECONDS - t0)) -le 3 ]'
  check "timeout leaves an exit marker rc 124" '[ "$(last_marker_rc "$log")" = 124 ]'
  export "$bin_var=$work/no-such-engine"
  run "$w" "$log" --timeout 30
  check "missing engine exits 4 with a reason" '[ "$RC" = 4 ] && printf "%s" "$STATUS" | jq -e ".detail | test(\"engine missing\")" > /dev/null'
  export "$bin_var=$engines/$fake"
  "$here/$w" --prompt-file "$work/prompt" --cwd "$work/repo" --log "$log" > /dev/null 2>&1
  check "usage error (no --timeout) exits 2" '[ "$?" = 2 ]'
  unset HARNESS_FAKE_SCENARIO
}

probe_real() {
  local w=$1 bin_var=$2 cli=$3 name=$4 sid size1 t0
  if ! command -v "$cli" > /dev/null; then
    echo "$w (real $name): $cli not found, skipped"
    return
  fi
  if [ "${HARNESS_PROBE_REAL:-0}" != 1 ]; then
    echo "$w (real $name): found but HARNESS_PROBE_REAL is not 1 (needs a reachable model), skipped"
    return
  fi
  echo "$w (real $name: $(command -v "$cli"))"
  export "$bin_var=$(command -v "$cli")"
  local log="$work/real-$w.log" first=()
  rm -f "$log" "$log.stderr"
  [ "$w" = na.sh ] && first=(--session-id "$(cat /proc/sys/kernel/random/uuid)")
  # The verdict seat must answer APPROVE/REJECT; the bracketed directives script the stand-in and are
  # plain words to a real model.
  printf 'Say hi. If you are a reviewer, answer APPROVE. [openai:approve]\n' > "$work/real-prompt"
  STATUS=$("$here/$w" --prompt-file "$work/real-prompt" --cwd "$work/repo" --log "$log" --timeout 300 "${first[@]}" 2> "$work/stderr" | tail -n 1)
  RC=${PIPESTATUS[0]}
  check "completes with exit 0" '[ "$RC" = 0 ]'
  check "status line has the contract shape" status_shape
  sid=$(printf '%s' "$STATUS" | jq -r '.session_id // empty' 2> /dev/null)
  check "session_id present on completion" '[ -n "$sid" ]'
  check "exit marker rc 0 appended to the log" '[ "$(last_marker_rc "$log")" = 0 ]'
  size1=$(wc -c < "$log")
  STATUS=$("$here/$w" --prompt-file "$work/real-prompt" --cwd "$work/repo" --log "$log" --timeout 300 --resume "$sid" 2> "$work/stderr" | tail -n 1)
  RC=${PIPESTATUS[0]}
  check "resumed turn completes with the same session" '[ "$RC" = 0 ] && [ "$(printf "%s" "$STATUS" | jq -r .session_id)" = "$sid" ]'
  check "log appended with one exit marker per turn" '[ "$(wc -c < "$log")" -gt "$size1" ] && [ "$(grep -c "^{\"harness\":\"exit\"" "$log")" = 2 ]'
  if [ "${HARNESS_PROBE_STANDIN:-0}" = 1 ]; then
    printf 'Fail. [anthropic:error:500] [openai:error:500]\n' > "$work/real-prompt"
    STATUS=$("$here/$w" --prompt-file "$work/real-prompt" --cwd "$work/repo" --log "$log" --timeout 300 2> "$work/stderr" | tail -n 1)
    RC=${PIPESTATUS[0]}
    check "model HTTP error exits 3 with ok:false" '[ "$RC" = 3 ] && [ "$(printf "%s" "$STATUS" | jq -r .ok)" = false ]'
    printf 'Slowly. [anthropic:slow:600:100] [openai:slow:600:100]\n' > "$work/real-prompt"
    t0=$SECONDS
    STATUS=$("$here/$w" --prompt-file "$work/real-prompt" --cwd "$work/repo" --log "$log" --timeout 3 2> "$work/stderr" | tail -n 1)
    RC=${PIPESTATUS[0]}
    check "timeout exits 124 within timeout + 3 s" '[ "$RC" = 124 ] && [ $((SECONDS - t0)) -le 6 ]'
    check "timeout leaves an exit marker rc 124" '[ "$(last_marker_rc "$log")" = 124 ]'
  fi
  unset "$bin_var"
}

mkdir -p "$work/repo"
printf 'Say hi.\n' > "$work/prompt"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(na.sh ca.sh codex.sh)
for w in "${wanted[@]}"; do
  case $w in
    na.sh) probe na.sh HARNESS_CLAUDE_BIN fake-claude --resume
      check "--interactive without --input is refused with exit 5" '"$here/na.sh" --prompt-file "$work/prompt" --cwd "$work/repo" --log "$work/i.log" --timeout 5 --interactive > /dev/null 2>&1; [ "$?" = 5 ]'
      unset HARNESS_CLAUDE_BIN
      probe_real na.sh HARNESS_CLAUDE_BIN "$real_claude" claude ;;
    ca.sh) probe ca.sh HARNESS_CURSOR_BIN fake-cursor-agent --resume
      unset HARNESS_CURSOR_BIN
      probe_real ca.sh HARNESS_CURSOR_BIN "$real_cursor" cursor-agent ;;
    codex.sh) probe codex.sh HARNESS_CODEX_BIN fake-codex --resume
      unset HARNESS_CODEX_BIN
      probe_real codex.sh HARNESS_CODEX_BIN "$real_codex" codex ;;
    *) echo "probe: unknown wrapper $w" >&2; exit 2 ;;
  esac
done
echo "contract probe: $((checks - failures)) passed, $failures failed"
[ "$failures" = 0 ]
