"""What /metrics reports, in Prometheus' text format: one CollectorRegistry per app (tests build many apps; the
process-wide default registry would mix them). Requests and latencies by route (the contract's path template,
never the raw path), method and status, recorded by memfit/http/request_metrics.py; batch sizes, recorded by the fit
handler; and, read when scraped, the header cache's hits and misses, the index's artifacts per root and the
measurement history's rows. All of it is the answering process's own (with `memfit serve --workers N`, one
worker's: memfit_process_id names it)."""

from __future__ import annotations

import os
from collections import Counter as Tally
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memfit.service.fit_service import FitService

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text exposition format
BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32)


class ServiceCollector(Collector):
    """The fit service's numbers, read at each scrape."""

    def __init__(self, service: FitService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "memfit_process_id",
            "the process that answered this scrape: with `memfit serve --workers N`, each worker counts its own",
            value=os.getpid(),
        )
        cache = self.service.cache
        yield CounterMetricFamily(
            "memfit_header_cache_hits", "GGUF header facts answered from memory", value=cache.hits
        )
        yield CounterMetricFamily(
            "memfit_header_cache_misses",
            "GGUF header facts read from the file or the state directory",
            value=cache.misses,
        )
        index = self.service.index
        per_root = Tally(a.root for a in index.artifacts())
        artifacts = GaugeMetricFamily(
            "memfit_index_artifacts", "local artifacts indexed per model root", labels=["root", "kind"]
        )
        for root in index.roots:
            artifacts.add_metric([root.path, root.kind.value], per_root.get(root.path, 0))
        yield artifacts
        rows = self.service.history_rows()
        if rows is not None:  # no history, or one that cannot be read now (/health says why)
            yield GaugeMetricFamily("memfit_history_rows", "observations in the measurement history", value=rows)


class Metrics:
    """The app's registry and the metrics the request path records."""

    def __init__(self, service: FitService) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "memfit_http_requests",
            "HTTP requests answered, by the contract's route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "memfit_http_request_duration_seconds",
            "time from a request's arrival to the end of its answer",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.batch_sizes = Histogram(
            "memfit_fit_batch_size",
            "models asked about per POST /v1/models/fit/batch",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(ServiceCollector(service))

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        labels = (route, method, str(status))
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
