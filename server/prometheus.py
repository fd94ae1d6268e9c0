"""Prometheus metrics of one server (`Metrics`: a registry per app, so tests can run several in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# seconds: 0.5 ms .. 30 s
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 65536)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("electric_requests", "Requests answered, by route and transport",
                                ["route", "transport"], registry=r)
        self.failures = Counter("electric_request_failures", "Requests that failed, by route, transport, status "
                                "(HTTP code or gRPC status name) and error type",
                                ["route", "transport", "status", "error_type"], registry=r)
        self.request_seconds = Histogram("electric_request_duration_seconds", "Total time to answer a request",
                                         ["route", "transport"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue_seconds = Histogram("electric_queue_duration_seconds", "Time an input waited for its batch",
                                       ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.inference_seconds = Histogram("electric_inference_duration_seconds", "Time of one batch in the "
                                           "worker thread (pad, forward pass, post-processing)", ["model"],
                                           buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("electric_batch_size", "Inputs per forward pass", ["model"],
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_tokens = Histogram("electric_batch_tokens", "Padded tokens per forward pass", ["model"],
                                      buckets=TOKEN_BUCKETS, registry=r)
        # one series per (size, padded length) the batcher formed: bounded by max_batch_size x the backend's length
        # buckets; benchmarks/bench_efficiency.py replays these shapes on the bare runtime
        self.batch_shapes = Counter("electric_batch_shapes", "Forward passes by inputs (size) and padded length",
                                    ["model", "size", "length"], registry=r)
        self.input_tokens = Counter("electric_input_tokens", "Tokens of the inputs served", ["model"], registry=r)
        # the start-up warm-up's batches are counted here and kept out of the request metrics above and below
        self.warmup_batches = Counter("electric_warmup_batches", "Forward passes of the start-up warm-up (not in "
                                      "the queue, inference, batch and token metrics)", ["model"], registry=r)
        self.dropped = Counter("electric_dropped_inputs", "Queued inputs dropped because their client went away "
                               "or timed out", ["model"], registry=r)
        self.in_flight = Gauge("electric_requests_in_flight", "Requests admitted and not yet answered", registry=r)
        self.queued = Gauge("electric_queue_inputs", "Inputs waiting for a batch", ["model"], registry=r)
        self.ready = Gauge("electric_ready", "1 when the models are loaded and warmed up", registry=r)
        self._per_route: dict[tuple[str, str], tuple] = {}

    def observe_request(self, route: str, transport: str, status: int | str, error_type: str | None,
                        seconds: float) -> None:
        """Count one answered request; a failed one (error_type set) also by its status and error type."""
        per_route = self._per_route.get((route, transport))
        if per_route is None:  # labelled children, looked up once per route
            per_route = self._per_route[route, transport] = (self.requests.labels(route, transport),
                                                             self.request_seconds.labels(route, transport))
        per_route[0].inc()
        per_route[1].observe(seconds)
        if error_type is not None:
            self.failures.labels(route, transport, str(status), error_type).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
