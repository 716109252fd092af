"""A real schema registry for tests: Apicurio Registry with in-memory storage, built once from Maven
Central (tests/support/registry/pom.xml) into the cache outside the repository, and run with Java.
It serves the Confluent-compatible API the runtime's Avro and JSON Schema serdes speak, over HTTP, or over
HTTPS only, and may ask every request for a bearer token it verifies against a public key (Quarkus OIDC
with no OIDC server)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from runtime.devkafka.broker import free_port, stop_process
from runtime.devkafka.jars import DevKafkaError, require_tool
from stores.cache_dir import cache_root

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


@dataclass(frozen=True)
class RegistryTls:
    """The registry's certificate and its key (PEM), and the CA that signed it, which its clients trust."""

    cert_file: Path
    key_file: Path
    ca_file: Path


@dataclass
class LocalRegistry:
    """One registry process on 127.0.0.1; its log goes to `log_file`. With `tls` it serves HTTPS alone; with
    `token_key` (an RSA public key, base64 DER) every request needs a bearer JWT that key verifies."""

    log_file: Path
    port: int = 0
    tls: RegistryTls | None = None
    token_key: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    @property
    def url(self) -> str:
        """The base URL of the Confluent-compatible API, as an app's `schema_registry.url`."""
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}{CONFLUENT_API}"

    def _settings(self) -> dict[str, str]:
        settings = {"quarkus.http.host": "127.0.0.1", "quarkus.http.port": str(self.port)}
        if self.tls is not None:
            settings.update({
                "quarkus.http.ssl-port": str(self.port),
                "quarkus.http.port": "0",
                "quarkus.http.insecure-requests": "disabled",
                "quarkus.http.ssl.certificate.files": str(self.tls.cert_file),
                "quarkus.http.ssl.certificate.key-files": str(self.tls.key_file),
            })  # fmt: skip
        if self.token_key is not None:
            settings.update({"registry.auth.enabled": "true", "quarkus.oidc.public-key": self.token_key})
        return settings

    def start(self, timeout: float = 120.0) -> None:
        options = [f"-D{name}={value}" for name, value in self._settings().items()]
        # C1 alone: a test's registry answers few requests, and starts in about half the time without C2.
        command = [require_tool("java"), "-Xmx384m", "-XX:TieredStopAtLevel=1", *options, "-jar", str(registry_app())]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise DevKafkaError(f"the schema registry did not start:\n{self.log_file.read_text()[-3000:]}")
            time.sleep(0.3)

    def _answers(self) -> bool:
        """Whether it answers HTTP at all: one that asks for a token answers 401."""
        context = None if self.tls is None else ssl.create_default_context(cafile=str(self.tls.ca_file))
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2, context=context) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as error:
            return error.code == 401
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process.pid, timeout=30.0)
        self.process.wait()
        self.process = None
