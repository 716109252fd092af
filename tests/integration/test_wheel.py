"""The wheel as a user gets it: built from this tree, installed into a fresh virtualenv outside the
repository, and used from a directory of the user's own, where nothing of the repository is importable.

The virtualenv takes its dependencies from PyPI (through pip's cache) at the versions this repository's
environment has, so the test runs on what the suite runs on, and fails when a range in pyproject.toml
no longer admits them."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from runtime.devkafka.jars import kafka_version
from tests.conftest import TopicNamer
from tests.support.running import REPO

PACKAGES = ("runtime", "processors", "stores")
WORDS = ["apple", "pear", "apple", "fig", "apple", "pear"]

USER_MODULE = '''\
from processors import Context, Processor, Record


class Count(Processor):
    """Each word's running count, kept in a store."""

    def process(self, record: Record, ctx: Context) -> None:
        counts = ctx.store("counts")
        count: int = (counts.get(record.key) or 0) + 1
        counts.put(record.key, count)
        ctx.send({sink!r}, {{"word": record.key, "count": count}}, key=record.key)
'''

USER_TEST = """\
import sys
from collections.abc import Callable
from pathlib import Path

import runtime
from runtime.testkit import AppDriver


def test_counts_each_word(app_driver: Callable[..., AppDriver]) -> None:
    assert Path(runtime.__file__).is_relative_to(sys.prefix)
    counter = app_driver("app.yaml")
    for word in {words}:
        counter.pipe({source!r}, {{"n": 1}}, key=word)
    assert [(r.key, r.value["count"]) for r in counter.read({sink!r})] == {expected}
"""


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path


@dataclass(frozen=True)
class Project:
    directory: Path
    app_id: str
    source: str
    sink: str


def running_counts(words: list[str]) -> list[tuple[str, int]]:
    """What Count sends: each word with its count so far."""
    return [(word, words[: index + 1].count(word)) for index, word in enumerate(words)]


def user_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would import the repository's code instead of the wheel's."""
    dropped = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_PLUGINS"}
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, "PYTHONNOUSERSITE": "1", **extra}


def run(command: list[str | Path], cwd: Path, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    assert not cwd.resolve().is_relative_to(REPO), f"{cwd} is inside the repository"
    return subprocess.run(
        [str(part) for part in command],
        input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=180, check=False,
    )  # fmt: skip


def source_files() -> list[str]:
    """The tree's files as git sees them (tracked or new, never ignored): no build/, caches or state."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    return sorted(name for name in listed.split("\0") if name and (REPO / name).is_file())


def installed_versions() -> dict[str, str]:
    """This environment's distributions but this project's own, each at the version an import finds first."""
    ours = canonical(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"])
    versions: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name is not None and canonical(name) != ours:
            versions.setdefault(canonical(name), dist.version)
    return versions


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the tree, so that a stale build/ in the repository cannot slip into it."""
    source, dist = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for name in source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    built = run(
        [sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--quiet", "--disable-pip-version-check",
         "-w", dist],
        cwd=dist, env=user_env(),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (path,) = dist.glob("*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh virtualenv with the wheel, and the tools a user's project has: pytest and mypy."""
    root = tmp_path_factory.mktemp("venv")
    assert not root.resolve().is_relative_to(REPO)
    made = run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root, env=user_env())
    assert made.returncode == 0, made.stderr
    constraints = root / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in installed_versions().items()))
    installed = run(
        [sys.executable, "-m", "pip", "--python", root / "bin" / "python", "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", "--constraint", constraints, wheel, "pytest", "mypy"],
        cwd=root, env=user_env(),
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return Venv(root, root / "bin" / "python")


@pytest.fixture
def project(tmp_path: Path, topic_name: TopicNamer) -> Project:
    """A user's directory: their processor module, the app's YAML and a test of their own."""
    directory = tmp_path / "project"
    directory.mkdir()
    source, sink, app_id = topic_name("words"), topic_name("counted"), topic_name("app")
    (directory / "mymodule.py").write_text(USER_MODULE.format(sink=sink))
    app = {
        "app_id": app_id,
        "topics": {
            source: {"partitions": 3, "key_serde": "str", "value_serde": "json"},
            sink: {"partitions": 3, "key_serde": "str", "value_serde": "json"},
        },
        "processors": [
            {"name": "count", "class": "mymodule:Count", "inputs": [source], "outputs": [sink],
             "stores": {"counts": {"backend": "rocksdb", "key_serde": "str"}}},
        ],
        "guarantee": "exactly_once",
    }  # fmt: skip
    (directory / "app.yaml").write_text(yaml.safe_dump(app))
    (directory / "test_count.py").write_text(
        USER_TEST.format(words=WORDS, source=source, sink=sink, expected=running_counts(WORDS))
    )
    return Project(directory, app_id, source, sink)


def test_the_wheel_holds_the_three_packages_whole_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    metadata = {name for name in names if name.split("/")[0].endswith(".dist-info")}
    assert {name.split("/")[0] for name in names} - {name.split("/")[0] for name in metadata} == set(PACKAGES)
    shipped = [name for name in source_files() if name.split("/")[0] in PACKAGES]
    assert sorted(set(names) - metadata) == shipped
    assert {f"{package}/py.typed" for package in PACKAGES} <= set(names)
    assert {"runtime/devkafka/pom.xml", "runtime/devkafka/log4j2.yaml"} <= set(names)
    (entry_points,) = (name for name in metadata if name.endswith("/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        assert "kafka_actor_runtime = runtime.testkit.fixtures" in archive.read(entry_points).decode()


def test_the_packages_import_from_the_virtualenv_not_the_repository(venv: Venv, project: Project) -> None:
    directory = project.directory
    printed = run(
        [venv.python, "-c", "import json, processors, runtime, stores; "
         "print(json.dumps([runtime.__file__, processors.__file__, stores.__file__]))"],
        cwd=directory, env=user_env(),
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    for path in json.loads(printed.stdout):
        assert Path(path).resolve().is_relative_to(venv.root.resolve()), path


def test_a_users_app_runs_from_the_wheel_against_a_real_broker(
    venv: Venv, project: Project, kafka_bootstrap: str
) -> None:
    directory, source, sink = project.directory, project.source, project.sink
    env = user_env(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap)
    cli: list[str | Path] = [venv.python, "-m", "runtime"]

    described = run([*cli, "describe", "app.yaml", "--json"], cwd=directory, env=env)
    assert described.returncode == 0, described.stderr
    (processor,) = json.loads(described.stdout)["processors"]
    assert processor["stores"][0]["changelog"] == f"{project.app_id}-counts-changelog"

    created = run([*cli, "topics", "create", "--app", "app.yaml"], cwd=directory, env=env)
    assert created.returncode == 0, created.stderr
    lines = "".join(json.dumps({"key": word, "value": {"n": 1}}) + "\n" for word in WORDS)
    produced = run([*cli, "produce", source, "--app", "app.yaml"], cwd=directory, env=env, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert f"produced {len(WORDS)} records to {source}" in produced.stderr

    ran = run([*cli, "app.yaml", "--until-caught-up"], cwd=directory, env=env)
    assert ran.returncode == 0, ran.stderr

    consumed = run([*cli, "consume", sink, "--app", "app.yaml"], cwd=directory, env=env)
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines() if line.strip()]
    counted = sorted((record["key"], record["value"]["count"]) for record in records)
    assert counted == sorted(running_counts(WORDS))
    assert all(record["value"]["word"] == record["key"] for record in records)


def test_a_users_tests_get_the_app_driver_fixture_and_type_check_against_the_wheel(
    venv: Venv, project: Project
) -> None:
    directory = project.directory
    tested = run([venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=directory, env=user_env())
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "1 passed" in tested.stdout

    checked = run(
        [venv.python, "-m", "mypy", "--strict", "mymodule.py", "test_count.py"], cwd=directory, env=user_env()
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dev_broker_command_and_its_files_come_with_the_wheel(venv: Venv, tmp_path: Path) -> None:
    env = user_env(RUNTIME_CACHE_DIR=str(tmp_path / "cache"))
    status = run([venv.python, "-m", "runtime", "dev-kafka", "status"], cwd=tmp_path, env=env)
    assert (status.returncode, status.stdout.strip()) == (1, "no local Kafka is running"), status.stderr

    files = run(
        [venv.python, "-c", "import json; from importlib import resources; "
         "from runtime.devkafka.jars import kafka_version, pom_path; "
         "log4j = resources.files('runtime.devkafka').joinpath('log4j2.yaml'); "
         "print(json.dumps([str(pom_path()), kafka_version(), str(log4j), log4j.is_file()]))"],
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert files.returncode == 0, files.stderr
    pom, version, log4j, log4j_found = json.loads(files.stdout)
    assert Path(pom).resolve().is_relative_to(venv.root.resolve()) and version == kafka_version()
    assert Path(log4j).resolve().is_relative_to(venv.root.resolve()) and log4j_found
