"""Resolve Apache Kafka's broker jars from Maven Central into a cache outside the repository."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from stores.cache_dir import cache_root

INSTALL_HINT = (
    "a local Kafka broker needs Java 17+ and Maven: on Debian/Ubuntu run "
    "`apt-get install -y default-jdk-headless maven`, or set KAFKA_BOOTSTRAP_SERVERS "
    "(or kafka.bootstrap_servers in the app YAML) to use an existing broker"
)


class DevKafkaError(RuntimeError):
    """The local broker could not be set up or started."""


def pom_path() -> Path:
    return Path(str(resources.files("runtime.devkafka").joinpath("pom.xml")))


def kafka_version() -> str:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom_path().read_text())
    if match is None:
        raise DevKafkaError(f"{pom_path()} names no kafka.version")
    return match.group(1)


def require_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise DevKafkaError(f"`{name}` was not found: {INSTALL_HINT}")
    return found


def resolve_jars() -> Path:
    """Return the directory holding the broker's classpath, resolving it with Maven on first use.

    The directory is named after the pom's content: a pom that asks for other jars resolves into a new
    one, and a broker still running on the old jars keeps them."""
    digest = hashlib.sha256(pom_path().read_bytes()).hexdigest()[:12]
    libs = cache_root() / f"kafka-{kafka_version()}" / f"libs-{digest}"
    if (libs / ".complete").exists():
        return libs
    require_tool("java")
    mvn = require_tool("mvn")
    libs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom_path()),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise DevKafkaError(f"Maven could not resolve Apache Kafka {kafka_version()}:\n{result.stdout}{result.stderr}")
    (staging / ".complete").touch()
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    return libs


def classpath() -> str:
    return os.pathsep.join(str(jar) for jar in sorted(resolve_jars().glob("*.jar")))
