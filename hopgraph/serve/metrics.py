"""Prometheus metrics of one server (its own registry, so two apps in one process stay apart)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class _Counted(Collector):
    """A counter whose value is kept elsewhere (read when /metrics is scraped, never copied per event)."""

    def __init__(self, name: str, documentation: str, value: Callable[[], float]):
        self.name, self.documentation, self.value = name, documentation, value

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.value())


class Metrics:
    def __init__(self, log_dropped: Callable[[], int] | None = None) -> None:
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
        if log_dropped is not None:  # only when there is a request log (serve.request_log)
            self.registry.register(
                _Counted(
                    "hopgraph_request_log_dropped",
                    "Request log lines dropped because the log could not keep up (a stalled disk or stderr).",
                    log_dropped,
                )
            )

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
