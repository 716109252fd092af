"""Reading the app YAML: every mistake reported with its path in the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.config.app import AppConfig
from runtime.config.common import ConfigError
from runtime.redaction import redact
from runtime.substitution import UnsetVariable, expand_variables
from runtime.yaml_loader import MAX_BYTES, UnsafeYaml, load_yaml

# The cross-field checks' messages start with the path they are about.
SECTIONS_NAMED = ("processors[", "topics.", "global_stores.", "outboxes.", "table_followers.", "kafka.", "app_id:")


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(top level)"


def format_validation_error(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        message = problem["msg"].removeprefix("Value error, ")
        location = _location(tuple(problem["loc"]))
        if message.startswith(
            ("processors[", "topics.", "global_stores.", "outboxes.", "table_followers.", "kafka.", "app_id:")
        ):
            lines.append(message)  # a cross-field check that already names its path
        else:
            lines.append(f"{location}: {message}")
    return "\n".join(lines)


def parse_app(data: Any) -> AppConfig:
    """The app from the loaded YAML; every ConfigError message is already redacted."""
    if not isinstance(data, dict):
        raise ConfigError("(top level): expected a mapping with app_id, topics and processors")
    try:
        return AppConfig.model_validate(expand_variables(data))
    except ValidationError as error:
        raise ConfigError(redact(format_validation_error(error))) from None
    except UnsetVariable as error:
        raise ConfigError(str(error)) from None


def load_app(path: Path) -> AppConfig:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)  # a larger file is refused without reading it all
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    try:
        document = load_yaml(data)
    except UnsafeYaml as error:
        raise ConfigError(redact(f"{path} {error}")) from None
    return parse_app(document)
