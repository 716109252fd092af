"""A real schema registry for tests: Apicurio Registry with in-memory storage, built once from Maven
Central (tests/support/registry/pom.xml) into the cache outside the repository, and run with Java.
It serves the Confluent-compatible API the runtime's Avro and JSON Schema serdes speak."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from runtime.devkafka.broker import free_port, stop_process
from runtime.devkafka.jars import DevKafkaError, cache_root, require_tool

BUILD = Path(__file__).parent / "registry"
VERSION = "2.4.2.Final"
CONFLUENT_API = "/apis/ccompat/v7"


def registry_app() -> Path:
    """The runnable registry's jar, built with Maven on first use (about two minutes)."""
    home = cache_root() / f"apicurio-registry-{VERSION}"
    runner = home / "app" / "test-registry-1-runner.jar"
    if runner.exists():
        return runner
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=home))
    shutil.copytree(BUILD, staging, dirs_exist_ok=True)
    command = [require_tool("mvn"), "-q", "-B", "-s", "settings.xml", "package", "-DskipTests"]
    result = subprocess.run(command, cwd=staging, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise DevKafkaError(f"Maven could not build Apicurio Registry {VERSION}:\n{result.stdout}{result.stderr}")
    built = staging / "target"
    (built / "app").mkdir()
    shutil.move(built / "lib", built / "app" / "lib")
    shutil.move(built / "test-registry-1-runner.jar", built / "app" / runner.name)
    shutil.rmtree(home / "app", ignore_errors=True)
    (built / "app").rename(home / "app")
    shutil.rmtree(staging, ignore_errors=True)
    return runner


@dataclass
class LocalRegistry:
    """One registry process on 127.0.0.1; its log goes to `log_file`."""

    log_file: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    @property
    def url(self) -> str:
        """The base URL of the Confluent-compatible API, as an app's `schema_registry.url`."""
        return f"http://127.0.0.1:{self.port}{CONFLUENT_API}"

    def start(self, timeout: float = 120.0) -> None:
        command = [
            require_tool("java"), "-Xmx384m", "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
            "-jar", str(registry_app()),
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise DevKafkaError(f"the schema registry did not start:\n{self.log_file.read_text()[-3000:]}")
            time.sleep(0.3)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process.pid, timeout=30.0)
        self.process.wait()
        self.process = None
