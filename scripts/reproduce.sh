#!/usr/bin/env bash
# Rebuilds every committed result in scripts/results/ (about 3 h on a 2-core CPU; embeddings are
# cached in ~/.cache/hopgraph and LLM completions in .hopgraph/, so a second run pays far less).
# Run from the repository root with ../shared beside it, with nothing else using the CPU.
set -euo pipefail
MUSIQUE=../shared/data/musique/ketrag_500
HOTPOTQA=../shared/data/hotpotqa/dev_subsampled.jsonl
L150=(--chunking.size 150 --chunking.overlap 0)
METHODS=(--methods text,bm25,knng,keyword,concept,ppr)
hopgraph eval "$MUSIQUE" --index .hopgraph/musique-1200 "${METHODS[@]}" --out scripts/results/coverage_musique_l1200.json -q
hopgraph eval "$MUSIQUE" --index .hopgraph/musique-150 "${L150[@]}" "${METHODS[@]}" --out scripts/results/coverage_musique_l150.json -q
hopgraph eval "$HOTPOTQA" --index .hopgraph/hotpotqa-1200 "${METHODS[@]}" --out scripts/results/coverage_hotpotqa_l1200.json -q
hopgraph eval "$HOTPOTQA" --index .hopgraph/hotpotqa-150 "${L150[@]}" "${METHODS[@]}" --out scripts/results/coverage_hotpotqa_l150.json -q
CUE0=(--extraction.cue_alpha 0 --methods text,cue)
hopgraph eval "$MUSIQUE" --index .hopgraph/musique-150-cue0 "${L150[@]}" "${CUE0[@]}" --out scripts/results/cue_alpha0_musique_l150.json -q
hopgraph eval "$HOTPOTQA" --index .hopgraph/hotpotqa-150-cue0 "${L150[@]}" "${CUE0[@]}" --out scripts/results/cue_alpha0_hotpotqa_l150.json -q
python3 scripts/coverage_misses.py "$HOTPOTQA" --index .hopgraph/hotpotqa-1200 --methods text,bm25,ppr --out scripts/results/coverage_misses_hotpotqa_l1200.json
python3 scripts/coverage_misses.py "$HOTPOTQA" --index .hopgraph/hotpotqa-150 --methods text,bm25,ppr --out scripts/results/coverage_misses_hotpotqa_l150.json
# evidence_chunking.json compares two commits: see scripts/compare_evals.py for how it was made.
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
