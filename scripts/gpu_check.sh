#!/usr/bin/env bash
# Every GPU path against its CPU counterpart, in one result file (default scripts/results/gpu_check.json):
# CuPy kernels (cosine top-k, co-occurrence, PageRank, PPR), FAISS KNN, fp16 MiniLM embeddings, the
# pipeline's graph stages on cuda vs cpu, and MuSiQue-500 indexed with the Ray engine. Run from the
# repository root with ../shared beside it. On a machine without CUDA every path is recorded as
# "skipped: no CUDA device". Extra arguments go to scripts/gpu_check.py (e.g. --scale 0.01).
set -uo pipefail
OUT=${GPU_CHECK_OUT:-scripts/results/gpu_check.json}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "from hopgraph.kernels.backend import cupy_available, torch_cuda_available; print('cupy usable', cupy_available(), '| torch cuda', torch_cuda_available())"
python3 scripts/gpu_check.py --out "$OUT" "$@"
