"""OpenTelemetry traces and metrics for the runtime; see docs/telemetry.md."""

from runtime.telemetry.config import MetricsConfig, TelemetryConfig, TracesConfig
from runtime.telemetry.metrics import RuntimeMetrics
from runtime.telemetry.setup import Telemetry, TelemetryError
from runtime.telemetry.tracing import OtelRecordTracer, RecordTracer

__all__ = [
    "MetricsConfig",
    "OtelRecordTracer",
    "RecordTracer",
    "RuntimeMetrics",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryError",
    "TracesConfig",
]
