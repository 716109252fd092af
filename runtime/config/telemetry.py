"""The `telemetry:` section of the app YAML.

Every field left unset falls back to the standard OTEL_* environment variables (endpoint, protocol,
headers, sampler, export interval, service name), so a deployment can configure telemetry the way
it configures any other OpenTelemetry SDK.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OtlpProtocol = Literal["http/protobuf", "grpc"]
AttributeValue = str | bool | int | float


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TracesConfig(_Strict):
    """Where spans go; `none` leaves the per-record hot path untraced."""

    exporter: Literal["otlp", "console", "none"] = "none"
    # None: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
    protocol: OtlpProtocol | None = None
    # None: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else the local collector.
    # A base URL such as http://collector:4318 gets /v1/traces appended under http/protobuf.
    endpoint: str | None = None


class MetricsConfig(_Strict):
    """Where metrics go: pushed (otlp, console) every `export_interval_ms`, or scraped (prometheus)."""

    exporter: Literal["otlp", "prometheus", "console", "none"] = "none"
    protocol: OtlpProtocol | None = None
    endpoint: str | None = None
    # None: OTEL_METRIC_EXPORT_INTERVAL, else 60 s.
    export_interval_ms: int | None = Field(default=None, ge=100)
    # The Prometheus scrape endpoint (http://host:port/metrics).
    host: str = "0.0.0.0"
    port: int = Field(default=9464, ge=1, le=65535)


class TelemetryConfig(_Strict):
    """OpenTelemetry traces and metrics for the app; off unless an exporter is chosen."""

    # None: OTEL_SERVICE_NAME, else the app id.
    service_name: str | None = None
    resource_attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    traces: TracesConfig = Field(default_factory=TracesConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    # Fraction of new traces sampled; a record that carries a trace context follows its parent's
    # decision. None: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, else every trace (1.0).
    sampling_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    # A record not sampled passes its (unsampled) trace context on, so that the apps reading its
    # outputs drop their part of the trace too. False: its outputs carry none (68 bytes less each,
    # for apps whose readers are not traced), and a traced reader decides for them on its own.
    propagate_unsampled: bool = True

    @property
    def enabled(self) -> bool:
        return self.traces.exporter != "none" or self.metrics.exporter != "none"
