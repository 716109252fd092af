"""`${NAME}` / `${NAME:-default}` in the app YAML's strings, so secrets can stay out of the file.

Substituted values, and the values of keys that look like passwords or tokens, are remembered as
secrets on the way: no message shows them (runtime/redaction.py).
"""

from __future__ import annotations

import os
import re
from typing import Any

from runtime.redaction import looks_secret, remember

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class UnsetVariable(ValueError):
    """A `${NAME}` without a default whose variable is not set; the message names the YAML path."""


def expand_variables(node: Any, path: str = "") -> Any:
    """A copy of the loaded YAML with every reference replaced; mapping keys become strings
    (`123:` under topics is the topic "123", not an integer)."""
    if isinstance(node, dict):
        expanded = {}
        for key, value in node.items():
            name = str(key)
            expanded[name] = expand_variables(value, f"{path}.{name}" if path else name)
            if looks_secret(name) and isinstance(expanded[name], str):
                remember(expanded[name])
        return expanded
    if isinstance(node, list):
        return [expand_variables(value, f"{path}[{index}]") for index, value in enumerate(node)]
    if isinstance(node, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            value = os.environ.get(name, default)
            if value is None:
                raise UnsetVariable(f"{path}: environment variable {name} is not set")
            remember(value)
            return value

        return ENV_REFERENCE.sub(substitute, node)
    return node
