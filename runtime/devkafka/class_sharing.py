"""Class data sharing for the local broker's JVMs: the classes a broker loads are archived when the first
broker exits, and every later broker and storage format maps them instead of loading them again, so a
broker is ready sooner (the tests start dozens; README.md has the figure).

The archive belongs to one classpath and one JVM, which the JVM checks: it ignores one that does not match
and starts as it would without. The dumping JVM writes under a name of its own, and the archive is renamed
into place only once that JVM exited, so brokers started side by side never map a half-written one.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

from runtime.devkafka.jars import require_tool, resolve_jars


def archive_path() -> Path:
    """Beside the jars it was made from, named for the JVM that made it."""
    java = os.path.realpath(require_tool("java"))
    return resolve_jars() / f"broker-{hashlib.sha256(java.encode()).hexdigest()[:12]}.jsa"


class ClassSharing:
    """The archive options of one broker process: it maps the archive, or dumps one at its exit."""

    def __init__(self) -> None:
        self._archive: Path | None = None
        self._dumping: Path | None = None

    @property
    def archive(self) -> Path:
        """Found on first use, as the jars are resolved then."""
        if self._archive is None:
            self._archive = archive_path()
        return self._archive

    def mapping(self) -> list[str]:
        return [f"-XX:SharedArchiveFile={self.archive}"] if self.archive.exists() else []

    def mapping_or_dumping(self) -> list[str]:
        """For a broker that exits by its stop: one started before any archive exists writes it."""
        if self.archive.exists():
            return self.mapping()
        self._dumping = self.archive.with_name(f".{self.archive.name}.{uuid.uuid4().hex[:8]}")
        return [f"-XX:ArchiveClassesAtExit={self._dumping}"]

    def exited(self) -> None:
        """The broker's JVM has exited: the archive it wrote at its exit, if any, into place."""
        dumped, self._dumping = self._dumping, None
        if dumped is None or not dumped.exists():
            return
        if dumped.stat().st_size > 0 and not self.archive.exists():
            os.replace(dumped, self.archive)
        else:
            dumped.unlink(missing_ok=True)
