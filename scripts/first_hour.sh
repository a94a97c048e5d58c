#!/usr/bin/env bash
# The first hour with hopgraph on the example wiki (examples/wiki, 18 Markdown documents of a
# fictional company), with the real command line and no LLM server:
#   index the folder; list its documents; replace people/tomas-reyes.md by an edited copy given by
#   another path (examples/wiki-edited, same id through --root); ask the two-hop questions of
#   examples/wiki-questions.jsonl with the default method; delete one document; list again.
# Usage: scripts/first_hour.sh [WORKDIR]   (the index goes to WORKDIR/index; default: a new temporary folder)
# tests/test_first_hour.py runs the same steps and checks what they print.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d)}
index=$work/index
step() { printf '\n$ %s\n' "$*"; "$@"; }

step hopgraph index examples/wiki --out "$index" --overwrite
step hopgraph documents "$index"
step hopgraph update "$index" --add examples/wiki-edited/people/tomas-reyes.md --root examples/wiki-edited
step hopgraph documents "$index"
step hopgraph query "$index" --questions examples/wiki-questions.jsonl
step hopgraph update "$index" --delete policies/remote-work.md
step hopgraph documents "$index"
