#!/usr/bin/env bash
# Rebuilds every committed result in scripts/results/ (about 1.5 h on a 2-core CPU; embeddings are
# cached in ~/.cache/hopgraph, so a second run mostly re-times retrieval). Run from the repository
# root with ../shared beside it.
set -euo pipefail
MUSIQUE=../shared/data/musique/ketrag_500
HOTPOTQA=../shared/data/hotpotqa/dev_subsampled.jsonl
L150=(--chunking.size 150 --chunking.overlap 0)
hopgraph eval "$MUSIQUE" --index .hopgraph/musique-1200 --out scripts/results/coverage_musique_l1200.json -q
hopgraph eval "$MUSIQUE" --index .hopgraph/musique-150 "${L150[@]}" --out scripts/results/coverage_musique_l150.json -q
hopgraph eval "$HOTPOTQA" --index .hopgraph/hotpotqa-1200 --out scripts/results/coverage_hotpotqa_l1200.json -q
hopgraph eval "$HOTPOTQA" --index .hopgraph/hotpotqa-150 "${L150[@]}" --out scripts/results/coverage_hotpotqa_l150.json -q
python3 scripts/bench_pagerank.py
python3 scripts/bench_index_speed.py
python3 scripts/bench_scale.py
