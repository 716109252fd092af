"""A worker's health and readiness, answered over HTTP for an orchestrator's probes."""

from runtime.health.probes import Probes
from runtime.health.server import HealthServer

__all__ = ["HealthServer", "Probes"]
