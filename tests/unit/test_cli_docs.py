"""`--help` and docs/commands.md cover every command and option, and the docs name every environment
variable the code reads.

The parsers are taken from the code itself (the main parser, each command's `parser()`, their
subcommands) and the variables from the source (an `ast` scan), so a new option, command or variable
fails here until it is documented, rather than being found missing by a user.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from runtime import cli
from runtime.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
COMMANDS_DOC = REPO / "docs" / "commands.md"
RUN_HEADING = "`python -m runtime app.yaml`"
ENVIRONMENT_HEADING = "Environment variables"
SCANNED = ("runtime", "processors", "stores", "sources", "replay", "rewind", "testkit")

# Reads of a variable whose name is not the project's: `${NAME}` in the app's YAML names the user's own.
DYNAMIC_READS = {("runtime/substitution.py", "substitute")}


@dataclass(frozen=True)
class Parser:
    """A parser, the command words that reach it, and the docs section of its top-level command."""

    words: tuple[str, ...]
    parser: argparse.ArgumentParser
    heading: str

    @property
    def name(self) -> str:
        return " ".join(("python -m runtime", *self.words))


def _with_subcommands(words: tuple[str, ...], parser: argparse.ArgumentParser, heading: str) -> Iterator[Parser]:
    yield Parser(words, parser, heading)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from _with_subcommands((*words, word), sub, heading)


def _command_parser(name: str) -> argparse.ArgumentParser:
    module = importlib.import_module(COMMANDS[name][0])
    found: argparse.ArgumentParser = module.parser()
    return found


def all_parsers() -> list[Parser]:
    parsers = list(_with_subcommands((), cli._parser(), RUN_HEADING))
    for name in COMMANDS:
        parsers += _with_subcommands((name,), _command_parser(name), f"`{name}`")
    return parsers


PARSERS = all_parsers()


def _ids(parser: Parser) -> str:
    return " ".join(parser.words) or "app"


def sections(markdown: str) -> dict[str, str]:
    """Each `## ` heading's text -> its section, `### ` subsections included."""
    found: dict[str, str] = {}
    heading: str | None = None
    for line in markdown.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            found[heading] = ""
        elif heading is not None:
            found[heading] += line + "\n"
    return found


def section_of(heading: str) -> str:
    """The section whose heading contains `heading` (one section, so a misplaced heading fails clearly)."""
    matching = [text for title, text in sections(COMMANDS_DOC.read_text()).items() if heading in title]
    assert len(matching) == 1, f"docs/commands.md needs one '## ...{heading}...' section, has {len(matching)}"
    return matching[0]


def mentions(text: str, word: str) -> bool:
    """`word` as a whole: `--to` is not mentioned by `--to-topic`, nor OTEL_X by OTEL_X_Y."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if not isinstance(action, argparse._HelpAction)]


@pytest.mark.parametrize("parser", PARSERS, ids=_ids)
def test_every_argument_has_a_help_text(parser: Parser) -> None:
    missing = []
    for action in options(parser.parser):
        if isinstance(action, argparse._SubParsersAction):
            missing += [
                f"{parser.name} {choice.dest}" for choice in action._choices_actions if not (choice.help or "").strip()
            ]
        elif not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            missing.append(f"{parser.name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"without a help text: {missing}"


@pytest.mark.parametrize("parser", PARSERS, ids=_ids)
def test_help_exits_0_and_shows_every_option(parser: Parser, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([*parser.words, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"usage: {parser.name}"), shown
    for action in options(parser.parser):
        for option in action.option_strings:
            assert mentions(shown, option), f"{parser.name} --help does not show {option}"


def test_the_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = capsys.readouterr().out
    assert [name for name in COMMANDS if not mentions(shown, name)] == []


@pytest.mark.parametrize("parser", PARSERS, ids=_ids)
def test_the_docs_describe_every_option_in_the_section_of_its_command(parser: Parser) -> None:
    section = section_of(parser.heading)
    words: list[str] = [*parser.words[1:]]
    for action in options(parser.parser):
        words += [option for option in action.option_strings if option not in ("-h", "--help")]
        if not action.option_strings and action.choices is not None:  # subcommands, dev-kafka's start|stop|status
            words += list(action.choices)
    missing = [word for word in words if not mentions(section, word)]
    assert not missing, f"docs/commands.md, section {parser.heading}, does not mention {missing} of {parser.name}"


def test_the_docs_name_every_command() -> None:
    text = COMMANDS_DOC.read_text()
    missing = [name for name in COMMANDS if not mentions(text, f"python -m runtime {name}")]
    assert not missing, f"docs/commands.md never shows `python -m runtime <command>` for {missing}"


# --- environment variables -------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """One place that reads an environment variable: its name, or None when it is not a constant."""

    name: str | None
    where: str  # path:line
    function: str | None


class _Module:
    """One source file: its string constants and imports, so that a name can be resolved to its value."""

    def __init__(self, tree: ast.Module, path: str):
        self.tree, self.path = tree, path
        self.constants: dict[str, str] = {}
        self.imported: dict[str, tuple[str, str | None]] = {}  # local name -> (module, attribute or None)
        self.os_names: set[str] = set()  # names bound to the os module
        self.environ_names: set[str] = set()  # names bound to os.environ
        self.getenv_names: set[str] = set()  # names bound to os.getenv
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.partition(".")[0]
                    if alias.name == "os":
                        self.os_names.add(local)
                    self.imported[local] = (alias.name if alias.asname else local, None)
            elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                for alias in node.names:
                    local = alias.asname or alias.name
                    self.imported[local] = (node.module, alias.name)
                    if node.module == "os" and alias.name == "environ":
                        self.environ_names.add(local)
                    if node.module == "os" and alias.name == "getenv":
                        self.getenv_names.add(local)
        for statement in tree.body:
            target, value = _assignment(statement)
            if target is not None and isinstance(value, ast.Constant) and isinstance(value.value, str):
                self.constants[target] = value.value

    def is_environ(self, node: ast.expr) -> bool:
        return self._is_os(node, "environ", self.environ_names)

    def is_getenv(self, node: ast.expr) -> bool:
        return self._is_os(node, "getenv", self.getenv_names)

    def _is_os(self, node: ast.expr, attribute: str, imported_as: set[str]) -> bool:
        """`os.<attribute>` (under any name `os` was imported as), or a name it was imported as itself."""
        if isinstance(node, ast.Name):
            return node.id in imported_as
        return (
            isinstance(node, ast.Attribute)
            and node.attr == attribute
            and isinstance(node.value, ast.Name)
            and node.value.id in self.os_names
        )

    def resolve(self, node: ast.expr) -> str | None:
        """A string literal, a module constant, or a constant imported from another module."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            if node.id in self.constants:
                return self.constants[node.id]
            if node.id in self.imported:
                module, attribute = self.imported[node.id]
                return None if attribute is None else _imported_string(module, attribute)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.imported:
            module, attribute = self.imported[node.value.id]
            return _imported_string(module if attribute is None else f"{module}.{attribute}", node.attr)
        return None


def _assignment(statement: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return statement.target.id, statement.value
    return None, None


def _imported_string(module: str, attribute: str) -> str | None:
    """The value of `module.attribute` if it is a string: the project's own constants and those of
    libraries alike (opentelemetry.sdk.environment_variables.OTEL_SERVICE_NAME, say)."""
    try:
        imported: ModuleType = importlib.import_module(module)
    except ImportError:
        return None
    value = getattr(imported, attribute, None)
    return value if isinstance(value, str) else None


class _Reads(ast.NodeVisitor):
    """The environment reads of one module: `os.environ.get(X)`, `os.environ[X]`, `os.environ.setdefault(X,
    ...)` (a value already set wins), `os.getenv(X)` and `X in os.environ`. An X that is a parameter of the
    enclosing function is resolved at that function's calls in the same module."""

    def __init__(self, module: _Module):
        self.module = module
        self.reads: list[Read] = []
        self.stack: list[ast.FunctionDef | ast.AsyncFunctionDef] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._in_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._in_function(node)

    def _in_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node)
        self.generic_visit(node)
        self.stack.pop()

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        environ_method = (
            isinstance(function, ast.Attribute)
            and function.attr in ("get", "setdefault")
            and self.module.is_environ(function.value)
        )
        if (environ_method or self.module.is_getenv(function)) and node.args:
            self._read(node.args[0], node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self.module.is_environ(node.value):
            self._read(node.slice, node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for operator, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(operator, ast.In | ast.NotIn) and self.module.is_environ(right):
                self._read(node.left, node)
        self.generic_visit(node)

    def _read(self, argument: ast.expr, at: ast.AST) -> None:
        where = f"{self.module.path}:{getattr(at, 'lineno', 0)}"
        function = self.stack[-1] if self.stack else None
        name = self.module.resolve(argument)
        if name is None and function is not None and isinstance(argument, ast.Name):
            passed = self._passed_to(function, argument.id)
            if passed:
                self.reads += [Read(value, where, function.name) for value in passed]
                return
        self.reads.append(Read(name, where, function.name if function is not None else None))

    def _passed_to(self, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> list[str | None]:
        """What the module's calls of `function` pass as `parameter` (empty: it is no parameter, or never
        called here)."""
        positional = [argument.arg for argument in (*function.args.posonlyargs, *function.args.args)]
        keywords = {*positional, *(argument.arg for argument in function.args.kwonlyargs)}
        if parameter not in keywords:
            return []
        values: list[str | None] = []
        for node in ast.walk(self.module.tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if called != function.name:
                continue
            given = [keyword.value for keyword in node.keywords if keyword.arg == parameter]
            if parameter in positional and positional.index(parameter) < len(node.args):
                given.append(node.args[positional.index(parameter)])
            values += [self.module.resolve(value) for value in given]
        return values


def environment_reads(source: str, path: str) -> list[Read]:
    reads = _Reads(_Module(ast.parse(source), path))
    reads.visit(reads.module.tree)
    return reads.reads


def project_reads() -> list[Read]:
    found = []
    for package in SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            found += environment_reads(path.read_text(), relative)
    return found


def test_the_scan_finds_each_way_of_reading_the_environment() -> None:
    """The scan itself, on a module that reads in every form it knows: a scan that finds nothing would
    pass the docs test below whatever the docs say."""
    source = """
import os
from os import environ, getenv as env
from runtime.worker.supervisor import WORKER_INDEX
from opentelemetry.sdk import environment_variables as otel
from opentelemetry.sdk.environment_variables import OTEL_TRACES_SAMPLER

LOCAL = "FROM_A_CONSTANT"

a = os.environ.get("LITERAL_GET")
b = os.environ["SUBSCRIPT"]
c = os.getenv("GETENV")
d = env("GETENV_ALIAS")
e = environ.get(LOCAL)
f = "MEMBERSHIP" in os.environ
os.environ.setdefault("SETDEFAULT", "x")
g = os.environ.get(WORKER_INDEX)
h = os.environ.get(OTEL_TRACES_SAMPLER)
i = os.environ.get(otel.OTEL_SERVICE_NAME)
os.environ["ASSIGNED_ONLY"] = "x"


def protocol(variable: str) -> str | None:
    return os.environ.get(variable)


protocol("PASSED_AS_ARGUMENT")
protocol(variable=OTEL_TRACES_SAMPLER)


def dynamic(name: str) -> str | None:
    return os.environ.get(name.upper())
"""
    reads = environment_reads(source, "example.py")
    assert [read.name for read in reads] == [
        "LITERAL_GET",
        "SUBSCRIPT",
        "GETENV",
        "GETENV_ALIAS",
        "FROM_A_CONSTANT",
        "MEMBERSHIP",
        "SETDEFAULT",
        "KAFKA_ACTOR_WORKER_INDEX",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SERVICE_NAME",
        "PASSED_AS_ARGUMENT",
        "OTEL_TRACES_SAMPLER",
        None,
    ]
    assert reads[-1].function == "dynamic"


def test_the_scan_finds_the_reads_of_the_project() -> None:
    """A few that are known, each read in a different way, so that the scan is known to reach them."""
    names = {read.name for read in project_reads()}
    known = {
        "KAFKA_BOOTSTRAP_SERVERS",  # a literal
        "KAFKA_ACTOR_WORKER_INDEX",  # a constant of another module of the project
        "OTEL_SERVICE_NAME",  # a constant of opentelemetry's
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",  # a parameter, given that constant at the call
        "PYSPARK_PYTHON",  # setdefault
    }
    assert known <= names


def test_the_scan_names_the_variable_of_every_read() -> None:
    """A read it cannot name would go unchecked: give it a constant, or explain it in DYNAMIC_READS."""
    dynamic = [read for read in project_reads() if read.name is None]
    unexplained = [read.where for read in dynamic if (read.where.partition(":")[0], read.function) not in DYNAMIC_READS]
    assert not unexplained, f"environment reads whose variable the scan cannot name: {unexplained}"


def test_every_environment_variable_the_code_reads_is_documented() -> None:
    reads = project_reads()
    section = section_of(ENVIRONMENT_HEADING)
    missing = sorted(
        {f"{read.name} ({read.where})" for read in reads if read.name and not mentions(section, read.name)}
    )
    assert not missing, f"not in the '{ENVIRONMENT_HEADING}' section of docs/commands.md: {missing}"
