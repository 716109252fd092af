"""OpenTelemetry traces and metrics for the runtime; see docs/telemetry.md."""

from runtime.telemetry.metrics import RuntimeMetrics
from runtime.telemetry.setup import Telemetry, TelemetryError
from runtime.telemetry.tracing import OtelRecordTracer, RecordTracer

__all__ = [
    "OtelRecordTracer",
    "RecordTracer",
    "RuntimeMetrics",
    "Telemetry",
    "TelemetryError",
]
