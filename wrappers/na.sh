#!/usr/bin/env bash
# na.sh — dispatch one Claude Code turn (the "north" engine, direct or through claude-code-router).
#
#   na.sh --prompt-file F --cwd DIR --log FILE --timeout SECS [--model M]
#         [--session-id UUID | --resume UUID] [--interactive --input FIFO]
#
# Runs `claude -p <prompt> --output-format stream-json --verbose --include-partial-messages
# --session-id <uuid>` (or `--resume <uuid>`), stdout appended to FILE. The session id is assigned
# before the turn (the harness passes one; by hand the wrapper makes one), so kill-then-resume works
# before the first token. With --interactive, claude reads its input from FIFO (the live channel the
# supervisor owns: the prompt is its first line, steers and answers follow) instead of the argument.
# Contract: spec/WRAPPER-CONTRACT.md.
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
WRAPPER_NAME=na.sh
# shellcheck source=_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/_lib.sh"
ensure_group_leader "$@"
parse_flags "$@"

if [ "$INTERACTIVE" = 1 ] && [ -z "$INPUT" ]; then
  # The live channel is the supervisor's: without one there is nobody to write the turn's input.
  finish "$EX_INTERACTIVE" "interactive: the live channel needs --input FIFO (a FIFO the supervisor holds open; spec/WRAPPER-CONTRACT.md, Optional: live channel)" 0
fi

find_engine HARNESS_CLAUDE_BIN claude
if [ -n "$RESUME" ]; then
  SESSION_ID=$RESUME
  session_flags=(--resume "$RESUME")
else
  SESSION_ID=${SESSION_ARG:-$(cat /proc/sys/kernel/random/uuid 2> /dev/null || uuidgen | tr '[:upper:]' '[:lower:]')}
  session_flags=(--session-id "$SESSION_ID")
fi
printf '%s: claude session %s\n' "$WRAPPER_NAME" "$SESSION_ID" >&2

# Permissions: headless turns cannot answer prompts. Edits are accepted and the listed tools allowed
# (HARNESS_CLAUDE_ALLOWED_TOOLS); a task whose plan asks (approvals: "ask") runs in claude's default
# mode (HARNESS_CLAUDE_PERMISSION_MODE=default), so only the listed tools run unasked. HARNESS_CLAUDE_SKIP_PERMISSIONS=1 opts into
# --dangerously-skip-permissions instead (claude refuses it as root unless IS_SANDBOX=1).
if [ "${HARNESS_CLAUDE_SKIP_PERMISSIONS:-0}" = 1 ]; then
  perm_flags=(--dangerously-skip-permissions)
else
  perm_flags=(--permission-mode "${HARNESS_CLAUDE_PERMISSION_MODE:-acceptEdits}" --allowedTools "${HARNESS_CLAUDE_ALLOWED_TOOLS:-Bash Edit Write Read Glob Grep MultiEdit}")
fi
# Approvals of a batch turn (plan approvals: "ask"): the supervisor's MCP permission tool answers.
if [ -n "${HARNESS_CLAUDE_PERMISSION_MCP:-}" ] && [ "$INTERACTIVE" = 0 ]; then
  perm_flags+=(--mcp-config "$HARNESS_CLAUDE_PERMISSION_MCP" --permission-prompt-tool mcp__harness__approve)
fi
model_flags=()
[ -n "$MODEL" ] && model_flags=(--model "$MODEL")

# ANTHROPIC_* reach claude-code-router too (point ANTHROPIC_BASE_URL at it; never `ccr code`).
mapfile -t engine_env < <(compgen -e | grep '^CLAUDE_CODE_')
scoped_env "${engine_env[@]}" ANTHROPIC_BASE_URL ANTHROPIC_AUTH_TOKEN ANTHROPIC_API_KEY ANTHROPIC_MODEL \
  ANTHROPIC_SMALL_FAST_MODEL CLAUDE_CONFIG_DIR XDG_CONFIG_HOME DISABLE_TELEMETRY DISABLE_AUTOUPDATER \
  IS_SANDBOX
if [ "$INTERACTIVE" = 1 ]; then
  # The prompt arrives on the channel; tool calls the permission flags do not allow are asked there
  # (control_request can_use_tool) and answered by the supervisor.
  run_engine "$ENGINE" -p --input-format stream-json --replay-user-messages --permission-prompt-tool stdio \
    --output-format stream-json --verbose --include-partial-messages \
    "${session_flags[@]}" "${model_flags[@]}" "${perm_flags[@]}"
else
  prompt=$(cat "$PROMPT_FILE")
  run_engine "$ENGINE" -p "$prompt" --output-format stream-json --verbose --include-partial-messages \
    "${session_flags[@]}" "${model_flags[@]}" "${perm_flags[@]}"
fi
judge_exit
judge_result_line claude "claude turn completed"
