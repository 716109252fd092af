"""The peers' installations, made by the benchmark on first use under the cache directory and made anew when
what pins them changes: a virtualenv per Python peer (`requirements/<peer>.txt`), and the Kafka Streams
project built by Maven at the broker's Kafka version."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from runtime.devkafka.jars import kafka_version, require_tool
from stores.cache_dir import cache_root

HERE = Path(__file__).resolve().parent
KAFKA_STREAMS_PROJECT = HERE / "kafka_streams"
KAFKA_STREAMS_MAIN = "bench.peers.KafkaStreamsPeer"
FAILOVER_MAIN = "bench.peers.FailoverPeer"
# slf4j-simple: warnings and errors only, with the time, on stderr (the run's log).
JVM_LOGGING = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.showDateTime=true"]


def peers_cache() -> Path:
    return cache_root() / "peers"


def virtualenv_python(peer: str) -> Path:
    """The interpreter of `peer`'s virtualenv, which holds exactly `requirements/<peer>.txt`."""
    requirements = requirements_file(peer)
    home = peers_cache() / f"{peer}-{digest([requirements])}"
    python = home / "bin" / "python"
    if (home / ".complete").exists():
        return python
    shutil.rmtree(home, ignore_errors=True)
    print(f"installing {peer} into {home} ...", flush=True)
    run([sys.executable, "-m", "venv", str(home)], f"creating the {peer} virtualenv")
    run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)], f"installing {peer}")
    (home / ".complete").touch()
    return python


def requirements_file(peer: str) -> Path:
    return HERE / "requirements" / f"{peer}.txt"


def pinned_version(peer: str, package: str) -> str:
    """The version `requirements/<peer>.txt` pins `package` to."""
    found = re.search(rf"^{re.escape(package)}==(\S+)$", requirements_file(peer).read_text(), re.MULTILINE)
    if found is None:
        raise LookupError(f"{requirements_file(peer)} pins no {package}")
    return found.group(1)


def kafka_streams_command(main: str = KAFKA_STREAMS_MAIN) -> list[str]:
    """`java -cp ... <main>` (a class of the project), the project compiled with Kafka Streams at the broker's
    version."""
    version = kafka_version()
    sources = sorted(path for path in KAFKA_STREAMS_PROJECT.rglob("*") if path.is_file())
    build = peers_cache() / f"kafka-streams-{version}-{digest(sources)}"
    if not (build / ".complete").exists():
        shutil.rmtree(build, ignore_errors=True)
        print(f"building the Kafka Streams {version} peer into {build} ...", flush=True)
        maven = [require_tool("mvn"), "-q", "-B", "-f", str(KAFKA_STREAMS_PROJECT / "pom.xml")]
        goals = ["compile", "dependency:copy-dependencies"]
        run([*maven, f"-Dkafka.version={version}", f"-Dpeer.build={build}", *goals], "building the Kafka Streams peer")
        (build / ".complete").touch()
    classpath = os.pathsep.join([str(build / "classes"), str(build / "dependency" / "*")])
    return [require_tool("java"), *JVM_LOGGING, "-cp", classpath, main]


def java_version() -> str:
    done = subprocess.run([require_tool("java"), "-version"], capture_output=True, text=True, check=True)
    return done.stderr.splitlines()[0]


def digest(files: Iterable[Path]) -> str:
    """A short hash of the files' names and contents: a new one when any of them changes."""
    hashed = hashlib.sha256()
    for path in files:
        hashed.update(str(path.relative_to(HERE)).encode())
        hashed.update(path.read_bytes())
    return hashed.hexdigest()[:12]


def run(command: list[str], doing: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{doing} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
