"""An S3-compatible object store on 127.0.0.1, for development and tests: s3s-fs, the file-system server of
the s3s project (Apache-2.0), built from crates.io with cargo into a cache outside the repository.

It keeps each bucket as a directory and each object as a file under its data directory (a write goes to a
temporary file renamed into place), and checks every request's AWS signature against the one access key
it is started with, so a client with other credentials is refused as by any object store.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.devkafka.broker import free_port, port_is_free, stop_process
from stores.cache_dir import cache_root

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

CRATE, VERSION = "s3s-fs", "0.14.1"  # the newest release that builds with the Rust of this machine's image
REGION = "us-east-1"
INSTALL_HINT = (
    f"the local object store is built from crates.io with cargo (`cargo install {CRATE}`): install Rust "
    "1.92 or newer (rustup), or set AWS_ENDPOINT_URL and credentials to use another object store"
)


class DevS3Error(RuntimeError):
    """The local object store could not be built or started."""


def server_binary() -> Path:
    """The server's binary, built on first use (three minutes of CPU) into the cache, whole or not at all. A
    second caller waits for a build under way (`make test` starts one beside the tests, which the object
    store's tests then wait for) rather than starting another."""
    root = cache_root() / f"{CRATE}-{VERSION}"
    binary = root / "bin" / CRATE
    if binary.is_file():
        return binary
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{CRATE}-{VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        return binary if binary.is_file() else _build(root, binary)


def _build(root: Path, binary: Path) -> Path:
    cargo = shutil.which("cargo")
    if cargo is None:
        raise DevS3Error(f"`cargo` was not found: {INSTALL_HINT}")
    staging = Path(tempfile.mkdtemp(prefix=f"{CRATE}-", dir=root.parent))
    command = [
        cargo,
        "install",
        CRATE,
        "--version",
        VERSION,
        "--features",
        "binary",
        "--locked",
        "--root",
        str(staging),
    ]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise DevS3Error(f"cargo could not build {CRATE} {VERSION}:\n{built.stderr[-4000:]}")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return binary


@dataclass
class LocalS3:
    """One server on 127.0.0.1 with one access key, made here unless given: its clients take `environment()`."""

    data_dir: Path
    port: int = 0
    access_key: str = field(default_factory=lambda: f"dev{secrets.token_hex(8)}")
    secret_key: str = field(default_factory=lambda: secrets.token_hex(20), repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.port == 0:
            self.port = free_port()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def environment(self) -> dict[str, str]:
        """What an AWS client (boto3, the AWS CLI, Spark's s3a) reads to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,  # the name older clients read
        }

    def start(self, timeout: float = 30.0, detach: bool = False) -> None:
        """Start the server and return once it answers a signed request; `detach`ed, it outlives this process."""
        if not port_is_free(self.port):
            raise DevS3Error(f"port {self.port} on 127.0.0.1 is already in use")
        binary = server_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [str(binary), "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--access-key", self.access_key, "--secret-key", self.secret_key, str(self.data_dir)]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "RUST_LOG": "warn"},
                start_new_session=detach,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DevS3Error(f"{CRATE} exited during start-up:\n{self.log_tail()}")
            if self.answers():
                return
            time.sleep(0.1)
        self.stop()
        raise DevS3Error(f"{CRATE} did not answer within {timeout:.0f}s:\n{self.log_tail()}")

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def client(self) -> S3Client:
        """A client of this server with its key, whatever the environment says."""
        import boto3  # only the object store's users pay for importing it

        session = boto3.session.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key, region_name=REGION
        )
        return session.client("s3", endpoint_url=self.endpoint)

    def answers(self) -> bool:
        try:
            self.client().list_buckets()
        except Exception:  # not listening yet
            return False
        return True

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> LocalS3:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None:
            return
        stop_process(self.process.pid, timeout)
        self.process.wait()
        self.process = None


@contextlib.contextmanager
def throwaway() -> Iterator[LocalS3]:
    """A server of its own with its data in a new temporary directory, removed afterwards (a test session's)."""
    home = Path(tempfile.mkdtemp(prefix="kafka-actor-runtime-s3-"))
    with LocalS3(home / "data") as server:
        try:
            yield server
        finally:
            server.stop()
            shutil.rmtree(home, ignore_errors=True)
