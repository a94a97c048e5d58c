#!/usr/bin/env bash
# Rebuilds every committed result in scripts/results/ (about 3 h on a 2-core CPU; embeddings are
# cached in ~/.cache/hopgraph and LLM completions in .hopgraph/, so a second run pays far less).
# Run from the repository root with ../shared beside it, with nothing else using the CPU.
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
python3 scripts/bench_llm_tier.py --questions 3
python3 scripts/bench_extraction.py
python3 scripts/bench_rerank.py
python3 scripts/bench_incremental.py
python3 scripts/bench_incremental.py --llm
python3 scripts/bench_crash.py
python3 scripts/bench_serve.py
python3 scripts/bench_acl.py
python3 scripts/summarize.py --readme
