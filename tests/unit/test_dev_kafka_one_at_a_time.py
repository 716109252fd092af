"""`dev-kafka start` asked for a broker unlike the running one says so, rather than hand back the other."""

from __future__ import annotations

import pytest

from runtime.devkafka import managed
from runtime.devkafka.jars import DevKafkaError
from runtime.devkafka.secured import Security

RUNNING = managed.RunningBroker(pid=101, bootstrap_servers="127.0.0.1:9092", data_dir="/data")


def test_the_running_broker_is_reused_for_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(managed, "running", lambda: RUNNING)
    assert managed.start() == (RUNNING, False)
    assert managed.start(9092) == (RUNNING, False)


@pytest.mark.parametrize(
    ("port", "brokers", "secured", "wanted"),
    [
        (9093, 1, False, "on port 9093"),
        (None, 3, False, "with 3 brokers"),
        (None, 1, True, "with secured listeners"),
    ],
)
def test_another_kind_of_broker_is_refused_while_one_runs(
    monkeypatch: pytest.MonkeyPatch, port: int | None, brokers: int, secured: bool, wanted: str
) -> None:
    monkeypatch.setattr(managed, "running", lambda: RUNNING)

    def never(*_: object) -> Security:
        raise AssertionError("nothing is made for a refused start")

    monkeypatch.setattr(managed, "_security", never)
    with pytest.raises(DevKafkaError) as refused:
        managed.start(port, brokers, secured)
    message = str(refused.value)
    assert "already runs at 127.0.0.1:9092 (pid 101)" in message
    assert wanted in message
    assert "dev-kafka stop" in message
