"""Hadoop's S3A connector (hadoop-aws and the AWS SDK modules it uses), resolved from Maven Central with
stores/spark/s3a-pom.xml on first use into the cache outside the repository that holds Kafka's jars."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from stores.cache_dir import cache_root

INSTALL_HINT = (
    "the Spark jobs read s3:// paths through Hadoop's S3A connector, whose jars are resolved with Maven on "
    "first use: on Debian/Ubuntu run `apt-get install -y default-jdk-headless maven`"
)


class S3AJarsUnavailable(RuntimeError):
    """The connector's jars could not be resolved: the job does not start."""


def pom_path() -> Path:
    return Path(str(resources.files("stores.spark").joinpath("s3a-pom.xml")))


def hadoop_version() -> str:
    match = re.search(r"<hadoop.version>([^<]+)</hadoop.version>", pom_path().read_text())
    if match is None:
        raise S3AJarsUnavailable(f"{pom_path()} names no hadoop.version")
    return match.group(1)


def s3a_jars() -> list[Path]:
    """The connector's jars, resolved on first use. The directory is named after the pom's content: a pom
    that asks for other jars resolves into a new one, and a job still running keeps the old."""
    digest = hashlib.sha256(pom_path().read_bytes()).hexdigest()[:12]
    libs = cache_root() / f"hadoop-aws-{hadoop_version()}" / f"libs-{digest}"
    if not (libs / ".complete").exists():
        _resolve(libs)
    return sorted(libs.glob("*.jar"))


def _resolve(libs: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        raise S3AJarsUnavailable(f"`mvn` or `java` was not found: {INSTALL_HINT}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    command = [mvn, "-q", "-B", "-f", str(pom_path()), "dependency:copy-dependencies"]
    command += [f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise S3AJarsUnavailable(
            f"Maven could not resolve hadoop-aws {hadoop_version()}:\n{result.stdout}{result.stderr}"[-4000:]
        )
    (staging / ".complete").touch()
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
