"""aiokafka's private parts the runtime uses: the installed aiokafka has every one, and no module but
runtime/kafka/aiokafka_internals.py reaches any of them."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from functools import cache
from pathlib import Path

import aiokafka
import pytest

from runtime.kafka.aiokafka_internals import PARTITION_RECORDS_PARAMETERS, RELIED_ON, PartitionRecords

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "processors", "stores")
INTERNALS = "runtime.kafka.aiokafka_internals"
DOCUMENTED = ("aiokafka", "aiokafka.abc", "aiokafka.admin", "aiokafka.errors", "aiokafka.helpers", "aiokafka.structs")
"""aiokafka's documented modules (its docs' API reference, its packages' `__all__`): every name in them is public."""
OFFERED = {
    "aiokafka.admin.config_resource": {"ConfigResource", "ConfigResourceType"},  # what describe_configs takes
    "aiokafka.client": {"AIOKafkaClient", "CoordinationType"},  # exported; what its coordinator_lookup takes
    "aiokafka.coordinator.assignors.range": {"RangePartitionAssignor"},  # for partition_assignment_strategy
    "aiokafka.coordinator.assignors.abstract": {"AbstractPartitionAssignor"},  # what that strategy's assignors are
    "aiokafka.producer.message_accumulator": {"BatchBuilder"},  # documented: what create_batch returns
}
"""Names in aiokafka's other modules that its public methods take or return."""
PROTOCOL = "aiokafka.protocol."
"""The requests `AIOKafkaClient.send` takes, documented as aiokafka's protocol classes."""


@pytest.mark.parametrize(("owner", "attribute"), RELIED_ON, ids=[f"{o.__name__}.{a}" for o, a in RELIED_ON])
def test_the_installed_aiokafka_has_what_the_runtime_relies_on(owner: type, attribute: str) -> None:
    assert hasattr(owner, attribute) or attribute in assigned_to_self(owner), (
        f"aiokafka {aiokafka.__version__}'s {owner.__module__}.{owner.__qualname__} has no `{attribute}`: "
        "see runtime/kafka/aiokafka_internals.py"
    )


def test_partition_records_are_built_in_the_order_their_fields_are_read_back() -> None:
    assert tuple(inspect.signature(PartitionRecords).parameters) == PARTITION_RECORDS_PARAMETERS


def test_no_other_module_imports_what_aiokafka_does_not_offer_publicly() -> None:
    found = [
        f"{source}:{line} imports {name} from {module}"
        for source, tree in sources()
        for line, module, name in imports(tree)
        if module.split(".", maxsplit=1)[0] == "aiokafka" and not offered(module, name)
    ]
    assert found == []


def test_no_other_module_touches_an_attribute_aiokafka_keeps_private() -> None:
    """Another object's attribute named as one of aiokafka's private ones, or in a class derived from one of
    aiokafka's, an attribute of `self` named as one of that class's private ones."""
    private, derived = aiokafka_private_names(), aiokafka_bases()
    found: list[str] = []
    for source, tree in sources():
        found += [f"{source}:{node.lineno} {ast.unparse(node)}" for node in attributes(tree, of_self=False)
                  if node.attr in private]  # fmt: skip
        for klass in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name in derived):
            inherited = set().union(*(private_names_of(base) for base in derived[klass.name]))
            found += [f"{source}:{node.lineno} {ast.unparse(node)} in {klass.name}"
                      for node in attributes(klass, of_self=True) if node.attr in inherited]  # fmt: skip
    assert found == [], "aiokafka's private parts are reached through runtime/kafka/aiokafka_internals.py only"


@cache
def sources() -> list[tuple[str, ast.Module]]:
    """Every module of the wheel but aiokafka_internals, parsed."""
    paths = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    named = [(path.relative_to(ROOT).as_posix(), path) for path in paths]
    return [(source, ast.parse(path.read_text(), source)) for source, path in named if _module(source) != INTERNALS]


def imports(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, module, name) of each name imported from a module, and (line, module, "") of each module imported."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def offered(module: str, name: str) -> bool:
    return module in DOCUMENTED or name in OFFERED.get(module, ()) or module.startswith(PROTOCOL)


def attributes(tree: ast.AST, of_self: bool) -> list[ast.Attribute]:
    """The attributes read or set in `tree` whose names start with `_`: of `self` (or `cls`), or of anything else."""
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr.startswith("_")]
    return [node for node in found if _is_self(node.value) == of_self]


@cache
def aiokafka_private_names() -> frozenset[str]:
    """Every name starting with one `_` that the installed aiokafka's Python source defines or reads as an attribute."""
    names: set[str] = set()
    for path in Path(aiokafka.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
    return frozenset(name for name in names if _private(name))


@cache
def aiokafka_bases() -> dict[str, frozenset[type]]:
    """By name, the classes of the wheel with a class of aiokafka's among their bases (directly, or through
    classes of the wheel), and those classes of aiokafka's."""
    found: dict[str, frozenset[type]] = {}
    classes: list[tuple[str, list[str]]] = []
    for _, tree in sources():
        for _, module, name in imports(tree):
            if name and (module.split(".", maxsplit=1)[0] == "aiokafka" or module == INTERNALS):
                value = getattr(importlib.import_module(module), name, None)
                if isinstance(value, type) and value.__module__.split(".", maxsplit=1)[0] == "aiokafka":
                    found[name] = frozenset({value})
        classes += [(node.name, [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases])
                    for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]  # fmt: skip
    grown = True
    while grown:
        grown = False
        for name, bases in classes:
            inherited = found.get(name, frozenset()).union(*(found.get(base, frozenset()) for base in bases))
            if inherited != found.get(name, frozenset()):
                found[name], grown = inherited, True
    return found


def private_names_of(owner: type) -> set[str]:
    """The private names of `owner` and its bases: their members', and their instances' attributes."""
    return {name for name in set(dir(owner)) | assigned_to_self(owner) if _private(name)}


def assigned_to_self(owner: type) -> set[str]:
    """The attributes the Python source of `owner` and of its bases assigns to `self`."""
    names: set[str] = set()
    for klass in owner.__mro__:
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # built in, or compiled
            continue
        for node in ast.walk(ast.parse(source)):
            targets = node.targets if isinstance(node, ast.Assign) else []
            targets += [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
            names |= {target.attr for target in targets if isinstance(target, ast.Attribute) and _is_self(target.value)}
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module(source: str) -> str:
    return source.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")
