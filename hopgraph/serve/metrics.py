"""Prometheus metrics of one server (its own registry, so two apps in one process stay apart)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "hopgraph_requests",
            "HTTP requests by endpoint, retrieval method and status.",
            ["endpoint", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "hopgraph_request_seconds",
            "Request latency by endpoint.",
            ["endpoint"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.llm_tokens = Counter(
            "hopgraph_llm_tokens", "LLM tokens spent answering, by kind.", ["kind"], registry=self.registry
        )
        self.queue_depth = Gauge("hopgraph_job_queue_depth", "Update jobs queued or running.", registry=self.registry)
        self.documents = Gauge(
            "hopgraph_index_documents", "Documents in the live index version.", registry=self.registry
        )
        self.rate_limited = Counter(
            "hopgraph_rate_limited", "Requests refused by the per-token rate limit.", registry=self.registry
        )

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
