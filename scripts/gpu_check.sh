#!/usr/bin/env bash
# The checks that need a CUDA machine, in one run: CuPy kernels against numpy (tests and timings),
# MuSiQue-500 indexed on the GPU (fp16 embeddings, CuPy graph kernels) with its speed and coverage,
# then the whole test suite. Run from the repository root with ../shared beside it; results go to
# the folder given (default scripts/results). Where the BGE weights were brought onto the machine,
# BGE_M3=/path/to/bge-m3 and BGE_RERANKER=/path/to/bge-reranker-v2-m3 add their timings on MuSiQue-500.
set -uo pipefail
OUT=${1:-scripts/results}
MUSIQUE=../shared/data/musique/ketrag_500
WORK=$(mktemp -d)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'available', cupy.is_available(), '| torch', torch.__version__, 'cuda', torch.cuda.is_available())"
python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gpu.py 2>&1 | tee "$OUT/test_gpu.log"
python3 scripts/bench_gpu.py --out "$OUT/gpu_kernels.json"
python3 scripts/bench_index_speed.py --dataset "$MUSIQUE" --out "$OUT/index_speed_musique_l1200_gpu.json"
python3 -m hopgraph.cli eval "$MUSIQUE" --index "$WORK/musique-1200" --out "$OUT/coverage_musique_l1200_gpu.json" -q
if [ -n "${BGE_M3:-}" ]; then
  python3 scripts/bench_index_speed.py --dataset "$MUSIQUE" --set embedding.backend=bge-m3 --set "embedding.model=$BGE_M3" --set embedding.device=cuda --out "$OUT/index_speed_musique_l1200_bge_m3_gpu.json"
fi
if [ -n "${BGE_RERANKER:-}" ]; then
  python3 scripts/bench_rerank.py --dataset "$MUSIQUE" --set "rerank.model=$BGE_RERANKER" --set embedding.device=cuda --out "$OUT/rerank_musique_gpu.json"
fi
python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tail -25 | tee "$OUT/tests_on_gpu_machine.log"
rm -rf "$WORK"
