"""kafka-acls.sh's commands run as that script runs them: Kafka's AclCommand, from the local broker's jars."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from runtime.devkafka.jars import classpath, require_tool

LAUNCHER = Path(__file__).with_name("RunAclCommands.java")


def run_acl_commands(printed: str, command_config: Path) -> list[str]:
    """Run every `kafka-acls.sh` line of `printed` (commented lines are not commands), authenticated by
    `command_config`, in one JVM; returns the lines run."""
    commands = [line for line in printed.splitlines() if line.startswith("kafka-acls.sh ")]
    arguments = ["\t".join([*shlex.split(line)[1:], "--command-config", str(command_config)]) for line in commands]
    java = [require_tool("java"), "-Xmx128m", "-cp", classpath(), str(LAUNCHER)]
    result = subprocess.run(
        java, input="\n".join(arguments) + "\n", capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, f"{printed}\n{result.stdout}{result.stderr}"
    return commands


def admin_config(directory: Path, username: str, password: str) -> Path:
    """Client settings for AclCommand over the SASL_PLAINTEXT listener, as a principal that may alter ACLs."""
    path = directory / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{username}" password="{password}";\n'
    )
    return path
