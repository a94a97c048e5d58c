"""The published rates and prices the capacity model uses, each with its source and conditions."""

from __future__ import annotations

VLLM_BLOG = "https://blog.vllm.ai/2024/09/05/perf-update.html"
LLM_RATE = {
    "value": 5777.0,
    "unit": "generated tokens/s per H100",
    "source": "https://www.redhat.com/en/blog/efficient-and-reproducible-llm-inference-red-hat-mlperf-inference-v51-results",
    "quote": "5777 tokens/sec (Offline) and 5103 tokens/sec (Server) on a single H100 GPU",
    "conditions": (
        "MLPerf Inference v5.1, Llama-3.1-8B (FP8 quantised) served by vLLM 0.10.0 on RHEL 9.6, one H100, "
        "Offline scenario (all requests queued: batch chosen by the engine); MLPerf's Llama-3.1-8B task is "
        "news-article summarisation (CNN/DailyMail: long prompt, short output), so prefill of the prompts is inside the rate"
    ),
    "note": (
        f"vLLM's own benchmark post ({VLLM_BLOG}: Llama 3 8B on 1×H100, ShareGPT 500 prompts, avg 202 input / "
        "179 output tokens, all requests at once) publishes its throughput only as a chart image; its text gives "
        "ratios (2.7× over v0.5.3) but no absolute figure, so that figure could not be quoted and the MLPerf "
        "figure above (also vLLM) is used. BF16 instead of FP8 would be slower."
    ),
}
EMBED_ANCHOR = {
    "value": 0.17 * 115_000,
    "unit": "tokens/s on one NVIDIA L4",
    "source": "https://github.com/michaelfeil/infinity/blob/main/docs/docs/benchmarking.md",
    "quote": "NVIDIA L4 (BAAI/bge-large-en-v1.5 | bert-large): sentence-transformers (fp16) 0.17 requests/s; "
    "1 request = 256 sentences / 115_000 tokens (huggingface/TEI 0.54, infinity 0.51)",
    "conditions": "1×L4, cu122, requests of 256 sentences, several clients; sentence-transformers fp16 is what the "
    "embedding actors run",
}
EMBED_ASSUMPTIONS = {
    "h100_over_l4": 4.0,
    "why": (
        "ASSUMPTION, no published BGE-M3 throughput on an H100 was found (the BGE-M3 model card and paper give none; "
        "FlagEmbedding issue #419 gives the latency of one 2-sentence call, not a throughput). BGE-M3 is an "
        "XLM-RoBERTa-large encoder: 24 layers, hidden 1024, the shape of bert-large, so its compute per token is "
        "that of bge-large-en-v1.5 (its larger vocabulary only adds a table look-up). The L4 figure is scaled by "
        "4× for an H100, about half the ratio of the two GPUs' dense fp16 tensor peaks, as small encoders rarely "
        "reach peak."
    ),
}
PRICE = {
    "value": 3.00,
    "unit": "$ per H100-hour",
    "source": "https://pricegpu.pages.dev/blog/h100-vs-a100-cloud-price",
    "quote": "H100 SXM 80GB: $2.49 – $3.99 / hr typical on-demand (CoreWeave, Lambda, Crusoe, RunPod), early 2026",
    "note": "ASSUMPTION: the middle of that cloud on-demand range; on-prem amortised cost is not modelled. "
    "The cluster is paid for the whole build (GPUs wait while the driver runs the graph stages).",
}
