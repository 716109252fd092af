"""Hostile or odd app files: refused quickly with exit 2 and the reason, never a hang or a traceback.

The same network guard as tests/unit/test_config_cli.py: a file that got past validation would
connect, and end the process with the guard's exit status instead.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtime.config import load_app
from tests.support.config_cli import REPO, install_network_guard, run_cli
from tests.unit.test_config_cli import VALID, assert_config_error, processor

LAUGHS = "\n".join(
    [f'l0: &l0 ["{"lol" * 3}"]']
    + [f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]" for level in range(1, 10)]
)


def bomb_at_top_level() -> str:
    return f"{yaml.safe_dump(VALID, sort_keys=False)}{LAUGHS}\n"


def bomb_in_params() -> str:
    app = copy.deepcopy(VALID)
    processor(app)["params"] = {"lol": "PLACEHOLDER"}
    text = yaml.safe_dump(app, sort_keys=False)
    laughs = LAUGHS.replace("\n", "\n      ")
    return text.replace("lol: PLACEHOLDER", f"lol:\n      {laughs}")


def nested_in_params(levels: int, flow: bool) -> str:
    app = copy.deepcopy(VALID)
    processor(app)["params"] = {"deep": "PLACEHOLDER"}
    text = yaml.safe_dump(app, sort_keys=False)
    if flow:
        deep = "[" * levels + "]" * levels
    else:
        deep = "\n" + "".join(f"{'  ' * (level + 4)}k{level}:\n" for level in range(levels)) + "  " * (levels + 4) + "x"
    return text.replace("deep: PLACEHOLDER", f"deep: {deep}")


@pytest.fixture(scope="module")
def guard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_network_guard(tmp_path_factory.mktemp("network-guard"))


HOSTILE_TEXT = {
    "alias bomb at the top level": (
        bomb_at_top_level(),
        r"holds more than 100,000 values once its aliases are expanded",
    ),
    "alias bomb in params": (bomb_in_params(), r"holds more than 100,000 values once its aliases are expanded"),
    "an alias inside the list it names": (
        yaml.safe_dump(VALID, sort_keys=False) + "loop: &loop [1, *loop]\n",
        r"has an alias inside the collection it refers to",
    ),
    # libyaml's scanner refuses deep flow nesting itself (at 1,000 levels), before the loader's count does.
    "deep flow nesting": (
        nested_in_params(5000, flow=True),
        r"is not valid YAML: .*\n.*exceeded maximum nesting depth",
    ),
    "flow nesting above the limit": (nested_in_params(100, flow=True), r"nests values more than 64 levels deep"),
    "deep block nesting": (nested_in_params(900, flow=False), r"nests values more than 64 levels deep \(line \d+"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEXT))
def test_hostile_yaml_is_refused_quickly(case: str, guard_dir: Path, tmp_path: Path) -> None:
    text, expected = HOSTILE_TEXT[case]
    path = tmp_path / "app.yaml"
    path.write_text(text)
    result = run_cli(path, guard_dir, timeout=30)
    assert_config_error(result.stderr, result.returncode, path, (expected,))


def load_seconds(path: Path) -> float:
    """How long load_app takes in a fresh interpreter, imports left out; a hang fails the test."""
    script = (
        "import sys, time\n"
        "from runtime.config import ConfigError, load_app\n"
        "from pathlib import Path\n"
        "start = time.perf_counter()\n"
        "try:\n    load_app(Path(sys.argv[1]))\nexcept ConfigError:\n    pass\n"
        "print(time.perf_counter() - start)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, capture_output=True, text=True,
                            timeout=30, check=True)  # fmt: skip
    return float(result.stdout)


REASONABLE_ALIASES = """
app_id: anchors
topics:
  orders: &topic {partitions: 3, key_serde: str, value_serde: json}
  out: {<<: *topic, value_serde: msgpack}
processors:
  - {name: route, class: "processors:Processor", inputs: [orders], outputs: [out], params: {copy: *topic}}
"""


@pytest.mark.parametrize("case", ["alias bomb at the top level", "alias bomb in params"])
def test_aliases_load_but_an_alias_bomb_is_refused_in_well_under_a_second(case: str, tmp_path: Path) -> None:
    reasonable = tmp_path / "reasonable.yaml"
    reasonable.write_text(REASONABLE_ALIASES)
    config = load_app(reasonable)
    assert (config.topics["out"].partitions, config.topics["out"].value_serde) == (3, "msgpack")
    assert config.processors[0].params["copy"] == {"partitions": 3, "key_serde": "str", "value_serde": "json"}
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(HOSTILE_TEXT[case][0])
    assert load_seconds(bomb) < 0.2


def test_a_file_above_the_size_limit_is_refused_quickly(guard_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    filler = "# " + "x" * 78 + "\n"
    path.write_text(yaml.safe_dump(VALID) + filler * (20 * 1024 * 1024 // len(filler)))
    assert load_seconds(path) < 0.2
    result = run_cli(path, guard_dir, timeout=30)
    assert_config_error(result.stderr, result.returncode, path, (r"is larger than the limit of 1,048,576 bytes",))


@pytest.mark.parametrize(
    ("case", "data", "expected"),
    [
        ("latin-1 in a value", "app_id: café\n".encode("latin-1"), r"is not UTF-8 text \(byte 11 is 0xe9\)"),
        ("UTF-16", "app_id: x\n".encode("utf-16"), r"is not UTF-8 text \(byte 0 is 0xff\)"),
        ("binary", bytes(range(256)), r"is not UTF-8 text \(byte 128 is 0x80\)"),
    ],
)
def test_a_file_that_is_not_utf8_is_named_so(
    case: str, data: bytes, expected: str, guard_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "app.yaml"
    path.write_bytes(data)
    result = run_cli(path, guard_dir)
    assert_config_error(result.stderr, result.returncode, path, (expected,))
