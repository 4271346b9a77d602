# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables below are set here and read by the wrapper scripts
# wrappers/_lib.sh — the part of the wrapper contract (spec/WRAPPER-CONTRACT.md) that is the same for
# every engine: flags, env scoping, the process group, the timeout, signals, the log, the exit marker
# and the status line. Sourced by na.sh, ca.sh and codex.sh; not run on its own. Needs bash >= 5.1.

# Exit codes: one meaning each.
readonly EX_OK=0 EX_USAGE=2 EX_ENGINE=3 EX_MISSING=4 EX_INTERACTIVE=5 EX_TIMEOUT=124 EX_TERM=143

PROMPT_FILE='' CWD='' LOG='' TIMEOUT='' MODEL='' SESSION_ARG='' RESUME='' INTERACTIVE=0 INPUT=''
SESSION_ID='' FILES=() ENGINE_RC=0 TIMED_OUT=0 TERMINATED=0 ENGINE_PID='' TURN_OFFSET=0

# A JSON string literal of $1 (control characters other than \n \r \t are dropped).
json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  s=${s//$'\t'/\\t}
  s=$(printf '%s' "$s" | LC_ALL=C tr -d '\000-\010\013\014\016-\037')
  printf '"%s"' "$s"
}

# The status line: the last line of the wrapper's stdout. session_id is omitted when unknown (never
# fabricated: steer/resume is then unavailable for the task).
emit_status() {
  local ok=$1 detail=$2 files='' sep='' f
  for f in "${FILES[@]}"; do
    files+="$sep$(json_str "$f")"
    sep=','
  done
  if [ -n "$SESSION_ID" ]; then
    printf '{"ok":%s,"session_id":%s,"detail":%s,"files":[%s]}\n' "$ok" "$(json_str "$SESSION_ID")" "$(json_str "$detail")" "$files"
  else
    printf '{"ok":%s,"detail":%s,"files":[%s]}\n' "$ok" "$(json_str "$detail")" "$files"
  fi
}

# Appends the exit marker to the log, on a fresh line even if the engine died mid-line.
append_exit_marker() {
  local rc=$1
  [ -n "$LOG" ] && [ -e "$LOG" ] || return 0
  if [ -s "$LOG" ] && [ "$(tail -c 1 "$LOG" | od -An -c | tr -d ' ')" != '\n' ]; then
    printf '\n' >> "$LOG"
  fi
  # When it was written (GNU date's milliseconds; a date without %N gives no valid time, and the
  # event keeps the time it was read).
  local ts
  ts=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  if [ -n "$SESSION_ID" ]; then
    printf '{"harness":"exit","rc":%s,"session_id":%s,"ts":%s}\n' "$rc" "$(json_str "$SESSION_ID")" "$(json_str "$ts")" >> "$LOG"
  else
    printf '{"harness":"exit","rc":%s,"ts":%s}\n' "$rc" "$(json_str "$ts")" >> "$LOG"
  fi
}

# Ends the wrapper: exit marker (when a turn was attempted), status line, exit code.
finish() {
  local rc=$1 detail=$2 marker=${3:-1}
  [ "$marker" = 1 ] && append_exit_marker "$rc"
  if [ "$rc" = 0 ]; then emit_status true "$detail"; else emit_status false "$detail"; fi
  exit "$rc"
}

usage_error() {
  printf '%s: %s\n' "$WRAPPER_NAME" "$1" >&2
  finish "$EX_USAGE" "usage: $1" 0
}

# Parses the fixed flag set. Adapter-specific flags are handled by the caller's extra_flag function
# (which returns 1 for a flag it does not know).
parse_flags() {
  local need
  while [ $# -gt 0 ]; do
    case $1 in
      --prompt-file | --cwd | --log | --timeout | --model | --session-id | --resume | --input)
        [ $# -ge 2 ] || usage_error "$1 needs a value"
        need=$2
        case $1 in
          --prompt-file) PROMPT_FILE=$need ;;
          --cwd) CWD=$need ;;
          --log) LOG=$need ;;
          --timeout) TIMEOUT=$need ;;
          --model) MODEL=$need ;;
          --session-id) SESSION_ARG=$need ;;
          --resume) RESUME=$need ;;
          --input) INPUT=$need ;;
        esac
        shift 2
        ;;
      --interactive)
        INTERACTIVE=1
        shift
        ;;
      *) usage_error "unknown flag ${1:0:80}" ;;
    esac
  done
  [ -n "$PROMPT_FILE" ] || usage_error "--prompt-file is required"
  if ! [ -f "$PROMPT_FILE" ] || ! [ -r "$PROMPT_FILE" ]; then
    usage_error "--prompt-file $PROMPT_FILE is not a readable file"
  fi
  [ -n "$CWD" ] || usage_error "--cwd is required"
  [ -d "$CWD" ] || usage_error "--cwd $CWD is not a directory"
  [ -n "$LOG" ] || usage_error "--log is required"
  [ -n "$TIMEOUT" ] || usage_error "--timeout is required"
  [[ $TIMEOUT =~ ^[1-9][0-9]{0,6}$ ]] || usage_error "--timeout $TIMEOUT is not a positive number of seconds"
  [ -z "$SESSION_ARG" ] || [ -z "$RESUME" ] || usage_error "--session-id and --resume are exclusive"
  [ -z "$INPUT" ] || [ "$INTERACTIVE" = 1 ] || usage_error "--input is the live channel: it goes with --interactive"
  [ -z "$INPUT" ] || [ -p "$INPUT" ] || usage_error "--input $INPUT is not a FIFO"
  local id
  for id in "$SESSION_ARG" "$RESUME"; do
    [ -z "$id" ] || [[ $id =~ ^[A-Za-z0-9._:-]{1,128}$ ]] || usage_error "session id ${id:0:80} has characters outside [A-Za-z0-9._:-]"
  done
  # The transcript is the user's only (0600, its dir 0700 when made here); the engine itself keeps
  # the user's umask, so the files it writes in the worktree get the repository's usual modes.
  (umask 077 && mkdir -p "$(dirname "$LOG")") 2>/dev/null
  (umask 077 && : >> "$LOG") 2>/dev/null || usage_error "--log $LOG cannot be appended to"
  (umask 077 && : >> "$LOG.stderr") 2>/dev/null || usage_error "--log $LOG.stderr cannot be appended to"
  TURN_OFFSET=$(wc -c < "$LOG" | tr -d ' ')
}

# This process's process group id.
own_pgid() {
  if [ -r "/proc/$$/stat" ]; then
    local rest
    { read -r rest < "/proc/$$/stat"; } 2> /dev/null || return 0
    rest=${rest##*) }
    # shellcheck disable=SC2086
    set -- $rest
    printf '%s\n' "$3"
  else
    ps -o pgid= -p $$ | tr -d ' '
  fi
}

# The engine runs in the wrapper's process group, and the wrapper leads that group, so a killpg of
# the wrapper's pid reaches the engine and everything it started. Started by hand (not a group
# leader), the wrapper re-executes itself under setsid.
ensure_group_leader() {
  if [ "$(own_pgid)" != "$$" ] && [ -z "${HARNESS_WRAPPER_SETSID:-}" ] && command -v setsid > /dev/null; then
    HARNESS_WRAPPER_SETSID=1 exec setsid "$0" "$@"
  fi
}

# Pids in this process group other than this shell.
group_members() {
  local f rest pid pgrp self=$BASHPID
  for f in /proc/[0-9]*/stat; do
    # The group's processes exit while we read: a vanished file is skipped, silently (the braces
    # put the redirect of stderr before the failing `<`).
    { read -r rest < "$f"; } 2> /dev/null || continue
    pid=${rest%% *}
    rest=${rest##*) }
    # shellcheck disable=SC2086
    set -- $rest
    pgrp=$3
    if [ "$pgrp" = "$$" ] && [ "$pid" != "$$" ] && [ "$pid" != "$self" ]; then
      printf '%s\n' "$pid"
    fi
  done
}

# TERM to every other process of the group, a grace period, then KILL to what is left.
kill_group() {
  local grace=${HARNESS_KILL_GRACE:-5} pids waited=0
  mapfile -t pids < <(group_members)
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2> /dev/null
  while [ "$waited" -lt $((grace * 10)) ]; do
    kill -0 "$ENGINE_PID" 2> /dev/null || break
    sleep 0.1
    waited=$((waited + 1))
  done
  mapfile -t pids < <(group_members)
  [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2> /dev/null
  return 0
}

on_signal() {
  TERMINATED=1
  # A killpg already reached the engine; a signal to the wrapper alone is forwarded.
  kill_group
}

# Builds ENV_ARGS: the scoped environment the engine runs with (`env -i`). Passed through: the basics,
# the names given as arguments (per adapter), the HARNESS_* variables an engine may use (the run and
# task it works for; the fake engines' knobs), and the names listed in HARNESS_ENV_PASS. No other
# HARNESS_* variable (the API token, the home, token paths) reaches the engine, nor the model.
scoped_env() {
  local name
  ENV_ARGS=()
  # shellcheck disable=SC2086
  for name in PATH HOME USER LOGNAME LANG LC_ALL LC_CTYPE TERM TMPDIR TZ SHELL \
    HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy SSL_CERT_FILE NODE_EXTRA_CA_CERTS \
    "$@" ${HARNESS_ENV_PASS:-}; do
    if [ -n "${!name+x}" ]; then ENV_ARGS+=("$name=${!name}"); fi
  done
  while IFS= read -r name; do
    case $name in
      HARNESS_RUN | HARNESS_TASK | HARNESS_FAKE_*) ENV_ARGS+=("$name=${!name}") ;;
    esac
  done < <(compgen -e)
}

# Runs the engine command "$@" in the worktree with stdin closed, stdout appended to the log and
# stderr to LOG.stderr, bounded by the timeout. Sets ENGINE_RC, TIMED_OUT, TERMINATED.
run_engine() {
  local sleeper
  trap on_signal TERM INT HUP
  # stdin: nothing, or the live channel (a FIFO the supervisor holds open) in interactive mode.
  # With HARNESS_STAMP (the harness binary), `harness stamp` sits between the engine's stdout and
  # the log: it appends each line and its arrival time (LOG.times), and exits with the engine's code.
  # `env -i` comes first and execs the stamper, which the engine inherits the scoped environment
  # from: the values (API keys, HARNESS_ENV_PASS names) are in no long-lived process's argv, which
  # any uid can read with ps, only in environments, which only the user can.
  if [ -n "${HARNESS_STAMP:-}" ] && [ -x "$HARNESS_STAMP" ]; then
    (cd "$CWD" && exec env -i "${ENV_ARGS[@]}" "$HARNESS_STAMP" stamp --log "$LOG" -- "$@") \
      < "${INPUT:-/dev/null}" > /dev/null 2>> "$LOG.stderr" &
  else
    (cd "$CWD" && exec env -i "${ENV_ARGS[@]}" "$@") < "${INPUT:-/dev/null}" >> "$LOG" 2>> "$LOG.stderr" &
  fi
  ENGINE_PID=$!
  # The timer holds none of our stdio: a caller reading our stdout must not wait for it.
  sleep "$TIMEOUT" > /dev/null 2>&1 &
  sleeper=$!
  while :; do
    wait -n "$ENGINE_PID" "$sleeper" 2> /dev/null
    if [ "$TERMINATED" = 1 ]; then break; fi
    if ! kill -0 "$ENGINE_PID" 2> /dev/null; then break; fi
    if ! kill -0 "$sleeper" 2> /dev/null; then
      TIMED_OUT=1
      kill_group
      break
    fi
  done
  wait "$ENGINE_PID" 2> /dev/null
  ENGINE_RC=$?
  kill "$sleeper" 2> /dev/null
  wait "$sleeper" 2> /dev/null
  trap - TERM INT HUP
}

# This turn's part of the log (everything appended since the wrapper started).
turn_output() {
  tail -c +"$((TURN_OFFSET + 1))" "$LOG"
}

# FILES: paths changed in the worktree (git status), when it is a git worktree.
collect_files() {
  local entry status path
  FILES=()
  git -C "$CWD" rev-parse --is-inside-work-tree > /dev/null 2>&1 || return 0
  while IFS= read -r -d '' entry; do
    status=${entry:0:2}
    path=${entry:3}
    FILES+=("$path")
    # A rename/copy is followed by its original path: commit the deletion too.
    if [[ $status == R* || $status == C* ]]; then
      IFS= read -r -d '' path && FILES+=("$path")
    fi
  done < <(git -C "$CWD" status --porcelain=v1 -z --untracked-files=all 2> /dev/null)
}

# The engine binary: $1 = env override name, $2 = default command. Exits 4 when missing.
find_engine() {
  local override=${!1:-} cmd
  cmd=${override:-$2}
  if ! command -v "$cmd" > /dev/null 2>&1; then
    if [ -n "$override" ]; then
      finish "$EX_MISSING" "engine missing: $1=$cmd is not an executable"
    else
      finish "$EX_MISSING" "engine missing: $2 not found on PATH (set $1)"
    fi
  fi
  ENGINE=$(command -v "$cmd")
}

# Ends a turn whose stream closes with a stream-json `result` line (claude, cursor-agent): no such
# line → engine failure; `"is_error":true` → engine failure, with `terminal_reason` when the line has
# one (claude's `subtype` says "success" even on failure: is_error is the truth); else success.
# $1 = the engine's name in the detail, $2 = the detail on success.
judge_result_line() {
  local name=$1 done_detail=$2 result reason
  result=$(turn_output | grep '"type":"result"' | tail -n 1)
  collect_files
  if [ -z "$result" ]; then
    finish "$EX_ENGINE" "engine failed: $name exited 0 without a result line"
  fi
  if printf '%s' "$result" | grep -q '"is_error":true'; then
    reason=$(printf '%s' "$result" | sed -n 's/.*"terminal_reason":"\([^"]*\)".*/\1/p')
    finish "$EX_ENGINE" "engine failed: $name reported an error${reason:+ ($reason)}"
  fi
  finish "$EX_OK" "$done_detail"
}

# Final outcome of a turn that ran: timeout / termination / engine exit code.
# Returns 0 when the caller should go on judging the turn's own report.
judge_exit() {
  if [ "$TIMED_OUT" = 1 ]; then
    finish "$EX_TIMEOUT" "timeout: engine killed after ${TIMEOUT}s"
  fi
  if [ "$TERMINATED" = 1 ]; then
    finish "$EX_TERM" "terminated: wrapper received a signal; engine process group killed"
  fi
  if [ "$ENGINE_RC" != 0 ]; then
    local last
    last=$(tail -n 1 "$LOG.stderr" 2> /dev/null | cut -c1-300)
    collect_files
    finish "$EX_ENGINE" "engine failed: exit ${ENGINE_RC}${last:+: $last}"
  fi
  return 0
}
