#!/usr/bin/env bash
# codex.sh — dispatch one Codex turn as the review (verdict) seat.
#
#   codex.sh --prompt-file F --cwd DIR --log FILE --timeout SECS [--model M] [--resume THREAD_ID]
#
# Runs `codex exec --json --skip-git-repo-check -s read-only <prompt>` (or `codex exec resume --json
# <id> <prompt>`), stdout appended to FILE. The session id is the thread_id of the first stream event.
# The verdict is the first line of the last completed agent_message: `APPROVE` or `REJECT: <reason>`;
# it is reported as the status line's detail. Extra engine arguments (e.g. a model provider config):
# HARNESS_CODEX_ARGS, split on whitespace. Contract: spec/WRAPPER-CONTRACT.md.
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
# shellcheck disable=SC2034 # used by _lib.sh
WRAPPER_NAME=codex.sh
# shellcheck source=_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/_lib.sh"
ensure_group_leader "$@"
parse_flags "$@"
[ "$INTERACTIVE" = 0 ] || usage_error "--interactive is a claude-only seam (na.sh)"
[ -z "$SESSION_ARG" ] || usage_error "codex thread ids are assigned by the server; pass --resume THREAD_ID to continue one"

find_engine HARNESS_CODEX_BIN codex
mapfile -t engine_env < <(compgen -e | grep '^CODEX_')
scoped_env "${engine_env[@]}" OPENAI_API_KEY OPENAI_BASE_URL CODEX_HOME
model_flags=()
[ -n "$MODEL" ] && model_flags=(-m "$MODEL")
# shellcheck disable=SC2206
extra=(${HARNESS_CODEX_ARGS:-})
prompt=$(cat "$PROMPT_FILE")
if [ -n "$RESUME" ]; then
  run_engine "$ENGINE" exec resume --json --skip-git-repo-check "${model_flags[@]}" "${extra[@]}" "$RESUME" "$prompt"
else
  run_engine "$ENGINE" exec --json --skip-git-repo-check -s read-only "${model_flags[@]}" "${extra[@]}" "$prompt"
fi

# shellcheck disable=SC2034 # read by _lib.sh's finish
# The id rides only the first event of this turn's stream: {"type":"thread.started","thread_id":…}.
SESSION_ID=$(turn_output | head -n 1 | sed -n 's/^{"type":"thread.started","thread_id":"\([A-Za-z0-9._:-]*\)"}$/\1/p')
judge_exit

if ! turn_output | grep -q '"type":"turn.completed"'; then
  failed=$(turn_output | grep '"type":"turn.failed"' | tail -n 1 | sed -n 's/.*"message":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
  finish "$EX_ENGINE" "engine failed: codex turn did not complete${failed:+: $failed}"
fi
# The verdict: first line of the last agent_message (JSON-escaped text, cut at the first \n).
last=$(turn_output | grep '"type":"item.completed"' | grep '"type":"agent_message"' | tail -n 1)
text=$(printf '%s' "$last" | sed -n 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
first=${text%%\\n*}
first=$(printf '%s' "$first" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/\\"/"/g' -e 's/\\\\/\\/g')
case $first in
  APPROVE | APPROVE.) finish "$EX_OK" "APPROVE" ;;
  REJECT*) finish "$EX_OK" "REJECT${first#REJECT}" ;;
  *) finish "$EX_ENGINE" "no verdict: the final message must start with APPROVE or REJECT: <reason> (got: ${first:0:120})" ;;
esac
