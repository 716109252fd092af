"""The pytest fixture `app_driver`, registered by this package's `pytest11` entry point: installed, it is
in every test suite, with nothing to import."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from runtime.config import AppConfig
from runtime.testkit.driver import AppDriver

MakeDriver = Callable[..., AppDriver]


@pytest.fixture
def app_driver(tmp_path: Path) -> Iterator[MakeDriver]:
    """Builds drivers: `app_driver("app.yaml")`, or the same config as an `AppConfig` or a mapping, with
    `AppDriver`'s options; their stores in the test's `tmp_path`, each driver closed when the test ends."""
    drivers: list[AppDriver] = []

    def make(app: str | Path | AppConfig | Mapping[str, Any], **options: Any) -> AppDriver:
        options.setdefault("state_dir", tmp_path / f"state-{len(drivers)}")
        driver = AppDriver.from_yaml(app, **options) if isinstance(app, str | Path) else AppDriver(app, **options)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.close()
