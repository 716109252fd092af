"""The engine's floors run top-down as `docs/design.md` lists them: a file imports only what stands on a
floor below its own (or in its own folder), so no arrow runs back up and no circle crosses folders."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "processors", "stores")
TABLE_HEADING = "## The floors of the engine"


def floors() -> list[list[str]]:
    """The table's first column, top floor first: the paths each floor holds (a folder ends in `/`)."""
    lines = (ROOT / "docs" / "design.md").read_text().split(TABLE_HEADING)[1].splitlines()
    table = itertools.takewhile(lambda line: line.startswith("|"), lines[lines.index("| floor | owns |") :])
    return [re.findall(r"`([^`]+)`", row.split("|")[1]) for row in table if row.startswith("| `")]


def unit_of(path: str, units: list[str]) -> str | None:
    """The floor's path that holds `path`: the longest, so `runtime/` holds what no folder of it names."""
    holding = [unit for unit in units if path == unit or (unit.endswith("/") and path.startswith(unit))]
    return max(holding, key=len, default=None)


def module_file(module: str) -> str | None:
    """The file of this repository a dotted module name is, or None when it is not one of ours."""
    if module.split(".", maxsplit=1)[0] not in PACKAGES:
        return None
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(ROOT).as_posix()
    return None


def imported_files(path: Path) -> Iterator[tuple[int, str]]:
    """Every file of ours `path` imports, at any depth of its code (for type checking too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            # `from runtime import redaction` names a module; `from runtime.x import name`, a name in one.
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            modules = [module for module in submodules if module_file(module)] or [node.module]
        else:
            continue
        for module in modules:
            found = module_file(module)
            if found is not None:
                yield node.lineno, found


def sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_every_file_stands_on_one_floor() -> None:
    units = [unit for floor in floors() for unit in floor]
    assert len(units) == len(set(units)), "a path is on two floors"
    assert [path for path in sources() if unit_of(path.relative_to(ROOT).as_posix(), units) is None] == []


def test_no_file_imports_one_on_its_own_floor_or_above() -> None:
    floor_of = {unit: index for index, floor in enumerate(floors()) for unit in floor}
    units = list(floor_of)
    upward: list[str] = []
    for path in sources():
        source = path.relative_to(ROOT).as_posix()
        own = unit_of(source, units)
        assert own is not None
        for line, target in imported_files(path):
            theirs = unit_of(target, units)
            if theirs is not None and theirs != own and floor_of[theirs] <= floor_of[own]:
                upward.append(f"{source}:{line} imports {target} ({theirs}, floor {floor_of[theirs] + 1})")
    assert upward == []


def test_the_floors_are_read_from_the_table() -> None:
    read = floors()
    assert read[:2] == [["runtime/__main__.py"], ["runtime/cli.py"]]
    assert read[-1] == ["processors/"]
    assert len(read) >= 10
