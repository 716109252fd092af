"""A throwaway PostgreSQL cluster on 127.0.0.1, from Debian's `postgresql` package, for development,
examples and tests.

`initdb` makes the cluster in `data_dir` (once), with one superuser, `runtime`, trusted on loopback
only: the server listens on 127.0.0.1 and on a socket inside its data directory, nowhere else.
PostgreSQL refuses to run as root; as root, the server runs as the package's `postgres` user, and its
data directory must be one that user can reach (`reachable_dir`).

Given the throwaway CA's certificates (`runtime/devkafka/certificates.py`, the ones the secured local
Kafka uses), it serves TLS only, with a certificate for 127.0.0.1 and localhost: `runtime` is trusted over
TLS, any other role logs in by its password, and a connection without TLS is refused.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runtime.devkafka.broker import free_port
from runtime.devkafka.certificates import Certificates, Pem

SUPERUSER = "runtime"
DATABASE = "postgres"
INSTALL_HINT = "install Debian's postgresql package (`make setup` does, as root: apt-get install postgresql)"
SERVER_CERT, SERVER_KEY = "server.crt", "server.key"  # in the data directory, owned by the server's user
PLAIN_HBA = """local all all trust
host all all 127.0.0.1/32 trust
"""
TLS_HBA = f"""local all all trust
hostssl all {SUPERUSER} 127.0.0.1/32 trust
hostssl all all 127.0.0.1/32 scram-sha-256
"""


class DevPostgresError(RuntimeError):
    pass


def server_binaries() -> Path:
    """The newest installed server's bin directory (initdb, pg_ctl, postgres)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise DevPostgresError(f"no PostgreSQL server found under /usr/lib/postgresql: {INSTALL_HINT}")
    return found[-1].parent


def _server_user() -> str | None:
    """Who runs the server: None for the current user, `postgres` when that is root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise DevPostgresError(
            f"PostgreSQL does not run as root, and there is no 'postgres' user: {INSTALL_HINT}"
        ) from None
    return "postgres"


def reachable_dir(preferred: Path) -> Path:
    """`preferred`, or, as root, a directory under the system's temporary directory that the `postgres`
    user can reach (root's home is closed to it)."""
    if _server_user() is None:
        return preferred
    return Path(tempfile.gettempdir()) / f"kafka-actor-runtime-{preferred.name}"


@dataclass
class LocalPostgres:
    data_dir: Path
    port: int = 0
    certificates: Certificates | None = None  # serve TLS only, with their certificate for 127.0.0.1

    def __post_init__(self) -> None:
        if self.port == 0:
            self.port = free_port()

    @property
    def url(self) -> str:
        """The superuser's URL, verifying the server's certificate against the CA when it serves TLS."""
        url = f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"
        if self.certificates is None:
            return url
        return f"{url}?sslmode=verify-full&sslrootcert={self.certificates.ca_file}"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self, timeout: float = 60.0) -> None:
        """Make the cluster if there is none, then start the server and wait until it takes connections."""
        self._make_cluster()
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data_dir} -c max_connections=200"
        options += " " + self._configure_tls()
        command = [
            str(server_binaries() / "pg_ctl"),
            "start",
            "-w",
            "-t",
            str(int(timeout)),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-o",
            options,
        ]
        done = self._run(command, check=False)
        if done.returncode != 0:
            raise DevPostgresError(f"PostgreSQL did not start: {done.stdout}{done.stderr}\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            command = [
                str(server_binaries() / "pg_ctl"),
                "stop",
                "-w",
                "-t",
                str(int(timeout)),
                "-m",
                "fast",
                "-D",
                str(self.data_dir),
            ]
            self._run(command, check=False)

    def running(self) -> bool:
        done = self._run([str(server_binaries() / "pg_ctl"), "status", "-D", str(self.data_dir)], check=False)
        return done.returncode == 0

    def wipe(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def _make_cluster(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        user = _server_user()
        if user is not None:
            shutil.chown(self.data_dir, user, user)
            shutil.chown(self.data_dir.parent, user, user)
        command = [
            str(server_binaries() / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
        ]
        done = self._run(command, check=False)
        if done.returncode != 0:
            raise DevPostgresError(f"initdb failed: {done.stdout}{done.stderr}")

    def _configure_tls(self) -> str:
        """Write who may connect how, and the server's certificate when it serves TLS; the options that say
        whether it does (every start says so: a cluster started with TLS once may start without it later)."""
        tls = self.certificates
        self._write_owned(self.data_dir / "pg_hba.conf", PLAIN_HBA if tls is None else TLS_HBA)
        if tls is None:
            return "-c ssl=off"
        self._write_certificate(tls.pem("broker"))
        return f"-c ssl=on -c ssl_cert_file={SERVER_CERT} -c ssl_key_file={SERVER_KEY}"

    def serve_certificate(self, certificate: Pem) -> None:
        """Serve `certificate` from the next connection on (a reload, which takes effect a moment later; a
        restart serves the CA's certificate for 127.0.0.1 again): one that fails a client's checks."""
        self._write_certificate(certificate)
        self._run([str(server_binaries() / "pg_ctl"), "reload", "-D", str(self.data_dir)], check=True)

    def _write_certificate(self, certificate: Pem) -> None:
        self._write_owned(self.data_dir / SERVER_CERT, certificate.cert_file.read_text())
        self._write_owned(self.data_dir / SERVER_KEY, certificate.key_file.read_text())

    def _write_owned(self, path: Path, text: str) -> None:
        """A file only the server's user reads (PostgreSQL refuses a key file others can read)."""
        path.write_text(text)
        path.chmod(0o600)
        user = _server_user()
        if user is not None:
            shutil.chown(path, user, user)

    def _run(self, command: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        user = _server_user()
        if user is not None:
            command = ["runuser", "-u", user, "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, cwd="/")


@contextlib.contextmanager
def throwaway(certificates: Certificates | None = None) -> Iterator[LocalPostgres]:
    """A cluster of its own, made and started for a test session or a benchmark, removed afterwards (under the
    system's temporary directory, which the server's own user can reach when this runs as root); given the
    throwaway CA's certificates, serving TLS only."""
    home = Path(tempfile.mkdtemp(prefix="kafka-actor-runtime-postgres-"))
    server = LocalPostgres(home / "data", certificates=certificates)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
