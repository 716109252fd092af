"""Builds the OpenTelemetry providers an app's `telemetry:` section asks for, and shuts them down.

The providers are the app's own unless `install_global` is set: tests build several side by side
with in-memory exporters, and a library should not take over the process's global providers
without being asked. The engine asks, so that spans a processor opens through
`opentelemetry.trace.get_tracer(...)` are exported too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_SERVICE_NAME,
    OTEL_TRACES_SAMPLER,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from runtime.config.telemetry import MetricsConfig, OtlpProtocol, TelemetryConfig, TracesConfig
from runtime.telemetry.metrics import APP_ID, WORKER, RuntimeMetrics
from runtime.telemetry.record_span import RecordSpan, RecordSpanSink
from runtime.telemetry.record_span_export import RecordSpanExport, exporting_now
from runtime.telemetry.tracing import INSTRUMENTATION_NAME, OtelRecordTracer, RecordTracer

log = logging.getLogger(__name__)


class TelemetryError(Exception):
    """The telemetry section asks for something this installation cannot do."""


class Telemetry:
    """The app's tracer and metrics, and the providers behind them (None when that signal is off).

    `span_exporter` and `metric_reader` add an exporter or reader to what the config asks for, and
    switch the signal on by themselves: tests pass in-memory ones. An injected span exporter gets
    spans as they end, record spans included; a configured one gets them in batches, record spans
    through a `RecordSpanExport`, the runtime's and the processors' own through a `BatchSpanProcessor`.
    Every metric series is labelled with the app id and `worker`, the process's index under `--workers N`.
    """

    def __init__(
        self,
        config: TelemetryConfig,
        app_id: str,
        group: str | None = None,
        *,
        worker: int = 0,
        span_exporter: SpanExporter | None = None,
        metric_reader: MetricReader | None = None,
        install_global: bool = False,
    ):
        self.config = config
        self.group = group if group is not None else app_id
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        self._closers: list[Callable[[], None]] = []
        self._record_span_export: RecordSpanExport | None = None
        traces_on = config.traces.exporter != "none" or span_exporter is not None
        metrics_on = config.metrics.exporter != "none" or metric_reader is not None
        resource = _resource(config, app_id) if traces_on or metrics_on else None

        self.tracer: RecordTracer = RecordTracer()
        if traces_on:
            assert resource is not None
            ratio = _ratio(config.sampling_ratio)
            sampler = None if ratio is None else ParentBased(TraceIdRatioBased(ratio))
            provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
            sinks: list[RecordSpanSink] = []
            # Two exporters, each used by one thread: the SDK's batch processor's and the record spans'.
            exporter, record_exporter = configured_span_exporter(config.traces), configured_span_exporter(config.traces)
            if exporter is not None and record_exporter is not None:
                provider.add_span_processor(BatchSpanProcessor(exporter))
                self._record_span_export = RecordSpanExport(record_exporter, resource, INSTRUMENTATION_NAME)
                sinks.append(self._record_span_export)
            if span_exporter is not None:
                provider.add_span_processor(SimpleSpanProcessor(span_exporter))
                sinks.append(exporting_now(span_exporter, resource, INSTRUMENTATION_NAME))
            self.tracer_provider = provider
            tracer = provider.get_tracer(INSTRUMENTATION_NAME)
            self.tracer = OtelRecordTracer(
                tracer, _fan_out(sinks), self.group, provider.sampler, ratio, config.propagate_unsampled
            )

        meter = None
        if metrics_on:
            assert resource is not None
            readers = [] if metric_reader is None else [metric_reader]
            configured = self._metric_reader(config.metrics)
            if configured is not None:
                readers.append(configured)
            self.meter_provider = MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)
            meter = self.meter_provider.get_meter(INSTRUMENTATION_NAME)
        self.metrics = RuntimeMetrics(meter, self.group, {APP_ID: app_id, WORKER: worker})

        if install_global:
            if self.tracer_provider is not None:
                trace_api.set_tracer_provider(self.tracer_provider)
            if self.meter_provider is not None:
                metrics_api.set_meter_provider(self.meter_provider)

    @property
    def enabled(self) -> bool:
        return self.tracer_provider is not None or self.meter_provider is not None

    def force_flush(self, timeout_ms: int = 10_000) -> None:
        if self._record_span_export is not None:
            self._record_span_export.force_flush(timeout_ms / 1000)
        if self.tracer_provider is not None:
            self.tracer_provider.force_flush(timeout_ms)
        if self.meter_provider is not None:
            self.meter_provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """Export what is still buffered, then stop the exporters and the Prometheus endpoint."""
        if self._record_span_export is not None:
            self._record_span_export.shutdown()
            self._record_span_export = None
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # flushes the batch processors first
        if self.meter_provider is not None:
            self.meter_provider.shutdown()  # collects and exports one last time
        for close in self._closers:
            try:
                close()
            except Exception:  # shutting down: report, and go on closing the rest
                log.warning("closing a telemetry exporter failed", exc_info=True)
        self._closers.clear()

    def _metric_reader(self, config: MetricsConfig) -> MetricReader | None:
        if config.exporter == "prometheus":
            reader, close = _prometheus(config)
            self._closers.append(close)
            return reader
        exporter: MetricExporter
        if config.exporter == "otlp":
            exporter = _otlp_metric_exporter(config)
        elif config.exporter == "console":
            exporter = ConsoleMetricExporter()
        else:
            return None
        return PeriodicExportingMetricReader(exporter, export_interval_millis=config.export_interval_ms)


def _fan_out(sinks: list[RecordSpanSink]) -> RecordSpanSink:
    if len(sinks) == 1:
        return sinks[0]

    def to_all(span: RecordSpan) -> None:
        for sink in sinks:
            sink(span)

    return to_all


def _resource(config: TelemetryConfig, app_id: str) -> Resource:
    """Config attributes over OTEL_RESOURCE_ATTRIBUTES; service name: config, OTEL_SERVICE_NAME, app id."""
    attributes: dict[str, Any] = dict(config.resource_attributes)
    if config.service_name is not None:
        attributes[SERVICE_NAME] = config.service_name
    elif SERVICE_NAME not in attributes and not os.environ.get(OTEL_SERVICE_NAME):
        attributes[SERVICE_NAME] = app_id
    return Resource.create(attributes)


def _ratio(configured: float | None) -> float | None:
    """The ratio of parent-based sampling; None lets the SDK read OTEL_TRACES_SAMPLER (default: sample all)."""
    if configured is None and os.environ.get(OTEL_TRACES_SAMPLER):
        return None
    return 1.0 if configured is None else configured


def _protocol(configured: OtlpProtocol | None, signal_variable: str) -> OtlpProtocol:
    value = configured or os.environ.get(signal_variable) or os.environ.get(OTEL_EXPORTER_OTLP_PROTOCOL)
    if value in (None, "", "http/protobuf"):
        return "http/protobuf"
    if value == "grpc":
        return "grpc"
    raise TelemetryError(f"OTLP protocol '{value}' is not supported (use http/protobuf or grpc)")


def _http_endpoint(endpoint: str | None, signal_path: str) -> str | None:
    """A base URL (as in OTEL_EXPORTER_OTLP_ENDPOINT) gets the signal's path; a URL with a path is kept."""
    if endpoint is None:
        return None
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + signal_path
    return endpoint


def configured_span_exporter(config: TracesConfig) -> SpanExporter | None:
    if config.exporter == "console":
        return ConsoleSpanExporter()
    if config.exporter != "otlp":
        return None
    if _protocol(config.protocol, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) == "grpc":
        # Imported only when chosen: grpc is slow to import.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(endpoint=config.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=_http_endpoint(config.endpoint, "/v1/traces"))


def _otlp_metric_exporter(config: MetricsConfig) -> MetricExporter:
    if _protocol(config.protocol, OTEL_EXPORTER_OTLP_METRICS_PROTOCOL) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

        return GrpcMetricExporter(endpoint=config.endpoint)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=_http_endpoint(config.endpoint, "/v1/metrics"))


def _prometheus(config: MetricsConfig) -> tuple[MetricReader, Callable[[], None]]:
    """A reader that Prometheus scrapes at http://host:port/metrics, and how to stop serving it."""
    # Imported here: only an app that serves Prometheus pays for importing its client.
    import prometheus_client as client
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    # An own registry, so several apps (or tests) in one process do not collide in the global one.
    registry = client.CollectorRegistry()
    for collector in (client.ProcessCollector, client.PlatformCollector, client.GCCollector):
        collector(registry=registry)
    # Without the instrumentation scope's three otel_scope_* labels: every series of the runtime has the same.
    reader: MetricReader = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
    try:
        started = client.start_http_server(config.port, addr=config.host, registry=registry)
    except OSError as error:
        raise TelemetryError(
            f"metrics.port: cannot serve Prometheus metrics on {config.host}:{config.port} ({error.strerror})"
        ) from None
    log.info("serving Prometheus metrics at http://%s:%d/metrics", config.host, config.port)
    server = started[0] if isinstance(started, tuple) else None

    def close() -> None:
        if server is not None:
            server.shutdown()
            server.server_close()

    return reader, close
