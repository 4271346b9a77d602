#!/usr/bin/env bash
# Seeds each fuzz target's corpus with the stream fixtures of its adapter.
set -euo pipefail
cd "$(dirname "$0")"
for a in claude cursor codex; do
  mkdir -p "corpus/normalize_$a"
  for f in ../fixtures/streams/"$a"/*.jsonl; do
    case "$f" in *.events.jsonl) continue ;; esac
    cp "$f" "corpus/normalize_$a/"
  done
done
