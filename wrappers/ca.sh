#!/usr/bin/env bash
# ca.sh — dispatch one cursor-agent turn.
#
#   ca.sh --prompt-file F --cwd DIR --log FILE --timeout SECS [--model M] [--resume CHAT_ID]
#
# A fresh turn first runs `cursor-agent create-chat` (which prints a new chat id), so the session is
# known before the turn; then `cursor-agent -p --output-format stream-json --stream-partial-output
# --force --resume <chatId> <prompt>`, stdout appended to FILE. Contract: spec/WRAPPER-CONTRACT.md.
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
WRAPPER_NAME=ca.sh
# shellcheck source=_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/_lib.sh"
ensure_group_leader "$@"
parse_flags "$@"
[ "$INTERACTIVE" = 0 ] || usage_error "--interactive is a claude-only seam (na.sh)"
[ -z "$SESSION_ARG" ] || usage_error "cursor chat ids are made by create-chat; pass --resume CHAT_ID to continue one"

find_engine HARNESS_CURSOR_BIN cursor-agent
mapfile -t engine_env < <(compgen -e | grep '^CURSOR_')
scoped_env "${engine_env[@]}" CURSOR_API_KEY CURSOR_CONFIG_DIR XDG_CONFIG_HOME
if [ -n "$RESUME" ]; then
  SESSION_ID=$RESUME
else
  chat=$(cd "$CWD" && env -i "${ENV_ARGS[@]}" "$ENGINE" create-chat < /dev/null 2>> "$LOG.stderr" | tr -d '[:space:]')
  if [ -z "$chat" ] || ! [[ $chat =~ ^[A-Za-z0-9._:-]{1,128}$ ]]; then
    finish "$EX_ENGINE" "engine failed: cursor-agent create-chat printed no chat id"
  fi
  SESSION_ID=$chat
fi
printf '%s: cursor chat %s\n' "$WRAPPER_NAME" "$SESSION_ID" >&2
model_flags=()
[ -n "$MODEL" ] && model_flags=(--model "$MODEL")
prompt=$(cat "$PROMPT_FILE")
# --force: headless turns cannot answer command approvals.
run_engine "$ENGINE" -p --output-format stream-json --stream-partial-output --force \
  --resume "$SESSION_ID" "${model_flags[@]}" "$prompt"
judge_exit
judge_result_line cursor-agent "cursor turn completed"
