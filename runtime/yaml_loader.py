"""YAML that cannot hang or crash the loader: bounded size, nesting and alias expansion.

PyYAML composes aliases as shared nodes, so a few lines of "billion laughs" become a tree of
billions of values as soon as anything walks it; its composer also recurses once per nesting level.
Every bound is checked on the parser's events or the composed graph, before anything is built.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 100_000

BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Loader(BaseLoader):  # type: ignore[misc,valid-type]
    """PyYAML's constructors raise whatever a tagged value's conversion raises (`!!int ''` an
    IndexError): each becomes a YAML error at the value's line, as its other mistakes are."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as error:  # any conversion error of a tagged scalar
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.tag} cannot hold this value ({type(error).__name__}: {error})", node.start_mark
            ) from None


class UnsafeYaml(ValueError):
    """The text is not a YAML document the app loader accepts; the message follows the file's name."""


def load_yaml(data: bytes) -> Any:
    """The document in `data`, or UnsafeYaml: too large, not UTF-8, invalid, too deep or too big once expanded."""
    if len(data) > MAX_BYTES:
        raise UnsafeYaml(f"is larger than the limit of {MAX_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnsafeYaml(f"is not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})") from None
    try:
        _check_depth(text)
        loader = Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_expansion(node)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        raise UnsafeYaml(f"is not valid YAML: {error}") from None


def _check_depth(text: str) -> None:
    """Nesting is counted on the event stream, which the parser produces without recursion."""
    depth = 0
    for event in yaml.parse(text, Loader=Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                raise UnsafeYaml(f"nests values more than {MAX_DEPTH} levels deep{where}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_expansion(root: yaml.Node) -> None:
    """Count the values the document holds with every alias expanded, without expanding them:
    each distinct node's expanded size is computed once (depth is bounded, so recursion is safe)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise UnsafeYaml("has an alias inside the collection it refers to (a recursive document)")
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(key_node) + size(value_node) for key_node, value_node in node.value)
        in_progress.discard(key)
        if total > MAX_VALUES:
            raise UnsafeYaml(f"holds more than {MAX_VALUES:,} values once its aliases are expanded (an alias bomb?)")
        sizes[key] = total
        return total

    size(root)
