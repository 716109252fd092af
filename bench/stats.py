"""Small statistics and the JSON result files under bench/results/."""

from __future__ import annotations

import io
import json
import math
import os
import platform
import pstats
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiokafka

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(fraction * len(ordered)))
    return float(ordered[rank - 1])


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs."""
    if len(xs) < 2:
        return math.nan
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return math.nan
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "aiokafka": aiokafka.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "platform": platform.platform(),
    }


def cpu_model() -> str:
    """The processor's name as Linux gives it (/proc/cpuinfo), else as the platform module does."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def run_directory(name: str) -> Path:
    """A new bench/results/<name>-<timestamp>/ for one invocation: app YAMLs, runtime logs, result.json."""
    directory = RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    directory.mkdir(parents=True)
    return directory


def write_result(directory: Path, name: str, result: dict[str, Any]) -> Path:
    """Write `result`, plus the environment, to `directory`/result.json."""
    path = directory / "result.json"
    path.write_text(json.dumps({"benchmark": name, "environment": environment(), **result}, indent=2) + "\n")
    return path


def hotspots(profile: Path, top: int = 20) -> str:
    """The `top` functions of a cProfile output file by own time (tottime), as pstats prints them."""
    out = io.StringIO()
    pstats.Stats(str(profile), stream=out).sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    return text[text.find("   ncalls") :].rstrip()
