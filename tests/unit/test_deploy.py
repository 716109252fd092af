"""The deployment recipe of deploy/: manifests the Kubernetes API accepts, agreeing with the app they run
and the image they run it in, so that a port, a path or a timeout changed in one place fails here."""

from __future__ import annotations

import fnmatch
import json
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from runtime.config import AppConfig, parse_app
from runtime.console import log_format_from_environment
from runtime.kafka.connection import Clients, check_clients
from runtime.substitution import ENV_REFERENCE
from runtime.yaml_loader import load_yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
CONTAINERFILE = REPO / "deploy" / "Containerfile"
# Schemas kubernetes-validate ships; strict: a field the API does not know is an error, not ignored.
KUBERNETES_VERSION = "1.33"
# After shutdown_timeout_s, the worker still commits and closes: the grace period leaves this much for it.
COMMIT_AND_CLOSE_S = 30


def manifest_paths() -> list[Path]:
    return sorted(path for path in MANIFESTS.glob("*.yaml") if path.name != "kustomization.yaml")


def manifests() -> Iterator[dict[str, Any]]:
    for path in manifest_paths():
        yield from (document for document in yaml.safe_load_all(path.read_text()) if document)


def one(kind: str) -> dict[str, Any]:
    (found,) = [manifest for manifest in manifests() if manifest["kind"] == kind]
    return found


def pod() -> dict[str, Any]:
    template: dict[str, Any] = one("StatefulSet")["spec"]["template"]
    return template


def container() -> dict[str, Any]:
    (worker,) = pod()["spec"]["containers"]
    return dict(worker)


def port_number(port: int | str) -> int:
    """A probe's or a Service's port, by number or by the name of a container port."""
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container()["ports"] if p["name"] == port]
    return int(number)


def mount_path(volume: str) -> str:
    (path,) = [mount["mountPath"] for mount in container()["volumeMounts"] if mount["name"] == volume]
    return str(path)


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> AppConfig:
    """The ConfigMap's app, read as a pod reads it: with the container's environment and nothing else."""
    text = one("ConfigMap")["data"]["app.yaml"]
    for match in ENV_REFERENCE.finditer(text):
        monkeypatch.delenv(match.group(1), raising=False)
    pod_name = f"{one('StatefulSet')['metadata']['name']}-0"
    for variable in container()["env"]:
        if "value" in variable:
            monkeypatch.setenv(variable["name"], variable["value"])
        elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            monkeypatch.setenv(variable["name"], pod_name)
    config = parse_app(load_yaml(text.encode()))
    check_clients(config)  # as `python -m runtime` does before it starts
    return config


# The manifests, against the Kubernetes API's schemas.


@pytest.mark.parametrize("path", manifest_paths(), ids=lambda path: path.name)
def test_each_manifest_is_valid_for_the_kubernetes_api(path: Path) -> None:
    documents = [document for document in yaml.safe_load_all(path.read_text()) if document]
    assert documents, f"{path.name} holds no manifest"
    problems = []
    for document in documents:
        try:
            version = kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{document['kind']} {'.'.join(str(part) for part in error.path)}: {error.message}")
            continue
        assert version == KUBERNETES_VERSION, "validated against the schemas of another version"
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(path.name for path in manifest_paths())


# The manifests, against the app they run.


def test_probes_ask_the_apps_health_endpoints(app: AppConfig) -> None:
    assert app.health is not None, "health: is off, so the probes would find nothing listening"
    assert app.health.host in ("0.0.0.0", "::"), "the kubelet probes the pod's address, not localhost"
    worker = container()
    probes = {name: worker[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {name: probe["path"] for name, probe in probes.items()} == {
        "startupProbe": "/live",
        "livenessProbe": "/live",
        "readinessProbe": "/ready",
    }
    for name, probe in probes.items():
        assert port_number(probe["port"]) == app.health.port, name


def test_prometheus_scrapes_the_apps_metrics_port(app: AppConfig) -> None:
    metrics = app.telemetry.metrics
    assert metrics.exporter == "prometheus"
    assert metrics.host in ("0.0.0.0", "::")
    annotations = pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == metrics.port == port_number("metrics")


def test_grace_period_outlasts_the_shutdown_timeout(app: AppConfig) -> None:
    grace = pod()["spec"]["terminationGracePeriodSeconds"]
    assert grace >= app.shutdown_timeout_s + COMMIT_AND_CLOSE_S


def test_state_dir_is_the_pods_own_volume(app: AppConfig) -> None:
    (claim,) = one("StatefulSet")["spec"]["volumeClaimTemplates"]
    name = claim["metadata"]["name"]
    assert name not in {volume["name"] for volume in pod()["spec"].get("volumes", [])}, "a pod volume hides the claim"
    assert mount_path(name) == str(app.state_dir)


def test_the_worker_reads_the_config_maps_app() -> None:
    config_map = one("ConfigMap")
    (volume,) = [
        v for v in pod()["spec"]["volumes"] if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    ]
    (app_path,) = container()["args"]
    path = PurePosixPath(app_path)
    assert str(path.parent) == mount_path(volume["name"])
    assert path.name in config_map["data"]


def test_logs_are_json_lines(app: AppConfig) -> None:
    """The fixture set the container's environment: the runtime reads JSON from it."""
    assert log_format_from_environment() == "json"


def test_a_restarted_pod_gets_its_partitions_back(app: AppConfig) -> None:
    """Range assignment sorts the members by id, which Kafka makes of the client id and a random suffix:
    with the pod's name as client id, every pod gets the same partitions at every rebalance."""
    options = Clients(app, "kafka:9092").consumer_options()
    (assignor,) = options["partition_assignment_strategy"]
    pods = [f"{one('StatefulSet')['metadata']['name']}-{index}" for index in range(3)]
    assert options["client_id"] == pods[0]

    class Cluster:
        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(range(app.topics[topic].partitions))

    def assign() -> dict[str, list[tuple[str, list[int]]]]:
        """One rebalance: each pod joins with a new member id, as after a restart."""
        members = {f"{pod_name}-{uuid.uuid4()}": pod_name for pod_name in pods}
        subscriptions = {member: assignor.metadata(app.input_topics()) for member in members}
        assigned = assignor.assign(Cluster(), subscriptions)
        return {pod_name: assigned[member].assignment for member, pod_name in members.items()}

    first = assign()
    assert all(first.values())
    assert all(assign() == first for _ in range(10))


def test_services_and_budget_select_the_workers_pods() -> None:
    labels = pod()["metadata"]["labels"]
    statefulset, service = one("StatefulSet"), one("Service")
    selectors = {
        "StatefulSet": statefulset["spec"]["selector"]["matchLabels"],
        "Service": service["spec"]["selector"],
        "PodDisruptionBudget": one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    }
    for kind, selector in selectors.items():
        assert selector.items() <= labels.items(), kind
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    for port in service["spec"]["ports"]:
        assert port_number(port["targetPort"]) == port["port"], port["name"]


# The image, against the repository and the pod.


def instructions(stage: str = "all") -> list[tuple[str, str]]:
    """The Containerfile's (INSTRUCTION, arguments), continuation lines joined; "final": the last stage's."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in CONTAINERFILE.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        keyword, _, arguments = (pending + text).partition(" ")
        pending = ""
        if stage == "final" and keyword.upper() == "FROM":
            found = []
        found.append((keyword.upper(), arguments.strip()))
    return found


def arguments(text: str) -> list[str]:
    """Exec form (a JSON array) or shell form."""
    return list(json.loads(text)) if text.startswith("[") else shlex.split(text)


def final(keyword: str) -> list[str]:
    """The arguments of each `keyword` instruction of the image's own stage."""
    return [text for name, text in instructions("final") if name == keyword]


def copied_sources() -> list[str]:
    """What COPY takes from the build context (not from another stage)."""
    sources = []
    for keyword, text in instructions():
        if keyword in ("COPY", "ADD"):
            words = arguments(text)
            if not any(word.startswith("--from") for word in words):
                sources += [word for word in words if not word.startswith("--")][:-1]
    return sources


def ignored(source: str) -> bool:
    """Whether .dockerignore keeps the path, or a folder holding it, out of the context (last match wins)."""
    ignore_file = REPO / ".dockerignore"
    lines = ignore_file.read_text().splitlines() if ignore_file.exists() else []
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    path = PurePosixPath(source.rstrip("/"))
    candidates = [str(path), *(str(parent) for parent in path.parents if str(parent) != ".")]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if any(fnmatch.fnmatchcase(candidate, pattern.lstrip("!").rstrip("/")) for candidate in candidates):
            excluded = not negated
    return excluded


def test_image_copies_what_the_repository_has() -> None:
    sources = copied_sources()
    assert "pyproject.toml" in sources
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        assert not ignored(source), f"COPY {source}: left out of the build context by .dockerignore"


def test_image_ships_the_processors_the_app_names(app: AppConfig) -> None:
    sources = [PurePosixPath(source.rstrip("/")) for source in copied_sources()]
    for processor in app.processors:
        module = PurePosixPath(*processor.class_path.split(":")[0].split("."))
        assert any(module.is_relative_to(source) for source in sources), f"{processor.class_path}: not copied"


def test_image_entrypoint_runs_the_runtime() -> None:
    (entrypoint,) = final("ENTRYPOINT")
    assert arguments(entrypoint) == ["python", "-m", "runtime"]


def test_image_agrees_with_the_pod(app: AppConfig) -> None:
    """Its user is the pod's, it declares the ports the pod names and the volume the app writes to."""
    (user,) = final("USER")
    security = pod()["spec"]["securityContext"]
    assert user == f"{security['runAsUser']}:{security['runAsGroup']}"
    assert app.health is not None
    assert {int(port) for text in final("EXPOSE") for port in arguments(text)} == {
        app.health.port,
        app.telemetry.metrics.port,
    }
    (volume,) = final("VOLUME")
    assert arguments(volume) == [str(app.state_dir)]
    environment = dict(word.split("=", 1) for text in final("ENV") for word in arguments(text))
    assert environment["RUNTIME_LOG_FORMAT"] == "json"
