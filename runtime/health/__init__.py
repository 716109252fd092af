"""A worker's health and readiness, answered over HTTP for an orchestrator's probes, and its store queries."""

from runtime.health.probes import Probes
from runtime.health.queries import FORWARDED, QueryAnswers, QueryEndpoint, QueryRequest, Reply
from runtime.health.server import HealthServer

__all__ = ["FORWARDED", "HealthServer", "Probes", "QueryAnswers", "QueryEndpoint", "QueryRequest", "Reply"]
