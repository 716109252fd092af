"""A broker outage, as the operator of a worker sees it: how many log lines a minute of it costs, and how
soon after the broker is back a new record is processed and the worker reports ready again.

`python -m bench.outage [--outage-s 60] [--runs 3] [--partitions 3]`

Each run starts a broker of its own (it is killed), a worker with JSON logs and health endpoints, and
processes a first batch; then the broker is killed (SIGKILL) for `--outage-s` and started again. Once it
answers, one new record is produced: the figure is the time from the broker's return to that record's
output read back. Lines per minute of outage count what the worker printed about it (its own lines and
any client warning or error let through) over the time from the kill to the broker answering again; the
baseline in the same run is what the Kafka client would have printed without the folding (its messages
folded, as the runtime's last outage line counts them, plus those printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import msgpack
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.app import AppSpec, RuntimeProcess
from bench.broker import create_topics, topic_size
from bench.data import fill_topic
from bench.stats import median, run_directory, write_result
from runtime.devkafka import LocalBroker
from runtime.devkafka.broker import free_port
from tests.support.health import probe

FIRST_BATCH = 10_000
PROBE_KEY = b"after-the-outage"
FOLDED = re.compile(r"\((\d+) client messages not printed")


@dataclass(frozen=True)
class OutageRun:
    outage_seconds: float  # killed -> answering again (its start-up included)
    lines_told: int  # the runtime's own lines about the outage
    client_lines_printed: int  # the Kafka client's warnings and errors that were printed
    client_lines_folded: int
    return_to_record_seconds: float  # broker answering again -> the new record's output read back
    return_to_ready_seconds: float  # broker answering again -> /ready answers 200

    @property
    def lines_per_minute(self) -> float:
        return (self.lines_told + self.client_lines_printed) * 60 / self.outage_seconds

    @property
    def baseline_lines_per_minute(self) -> float:
        return (self.client_lines_folded + self.client_lines_printed) * 60 / self.outage_seconds


def run_once(directory: Path, run: int, outage_s: float, partitions: int) -> OutageRun:
    with tempfile.TemporaryDirectory(prefix="bench-outage-kafka-") as data_dir:
        broker = LocalBroker(data_dir=Path(data_dir))
        broker.start()
        try:
            return _outage(broker, directory, run, outage_s, partitions)
        finally:
            broker.stop()


def _outage(broker: LocalBroker, directory: Path, run: int, outage_s: float, partitions: int) -> OutageRun:
    bootstrap, health_port = broker.bootstrap_servers, free_port()
    spec = AppSpec(
        app_id=f"outage-{run}", bootstrap=bootstrap, input_topic="outage-in", output_topic="outage-out",
        partitions=partitions, processor_class="bench.processors:Transform",
        extra={"health": {"host": "127.0.0.1", "port": health_port}, "log_format": "json",
               # outputs wait out the outage rather than expire
               "kafka": {"bootstrap_servers": bootstrap, "producer": {"request_timeout_ms": 300_000}}},
    )  # fmt: skip
    asyncio.run(create_topics(bootstrap, {spec.input_topic: partitions, spec.output_topic: partitions}))
    asyncio.run(fill_topic(bootstrap, spec.input_topic, FIRST_BATCH, partitions))
    ready = (200, {"ready": True})
    worker = RuntimeProcess(spec.write(directory))
    try:
        until(lambda: asyncio.run(topic_size(bootstrap, spec.output_topic)) >= FIRST_BATCH, "the first batch", 120)
        until(lambda: probe(health_port, "/ready") == ready, "ready", 60)
        assert broker.process is not None
        killed = time.monotonic()
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait()
        broker.process = None
        time.sleep(outage_s)
        broker.start()  # returns once it answers
        back = time.monotonic()
        to_record = asyncio.run(one_record_through(bootstrap, spec.input_topic, spec.output_topic, partitions)) - back
        until(lambda: probe(health_port, "/ready") == ready, "ready again", 120)
        to_ready = time.monotonic() - back
        until(lambda: "Kafka is reachable again" in worker.log(), "the outage told over", 60)
    finally:
        worker.terminate()
    lines = [json.loads(line) for line in worker.log().splitlines()]
    told = [line["message"] for line in lines if line["message"].startswith(("Kafka is", "Kafka has been"))]
    printed = [
        line for line in lines if line["logger"].startswith("aiokafka") and line["level"] in ("WARNING", "ERROR")
    ]
    folded = FOLDED.search(told[-1])
    lines_folded = int(folded.group(1)) if folded else 0
    return OutageRun(back - killed, len(told), len(printed), lines_folded, to_record, to_ready)


async def one_record_through(bootstrap: str, source: str, sink: str, partitions: int) -> float:
    """Produce one record under a key of its own, and return the time its output is read back."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        outputs = [TopicPartition(sink, partition) for partition in range(partitions)]
        consumer.assign(outputs)
        for tp, offset in (await consumer.end_offsets(outputs)).items():
            consumer.seek(tp, offset)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(source, msgpack.packb({"n": -1}), key=PROBE_KEY)
        finally:
            await producer.stop()
        while True:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                if any(record.key == PROBE_KEY for record in records):
                    return time.monotonic()
    finally:
        await consumer.stop()


def until(condition: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outage-s", type=float, default=60.0, help="how long the broker stays killed")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    directory = run_directory("outage")
    runs = []
    for run in range(args.runs):
        result = run_once(directory, run, args.outage_s, args.partitions)
        runs.append(result)
        print(f"run {run}: {result.lines_per_minute:.1f} lines/min of outage (client alone: "
              f"{result.baseline_lines_per_minute:.0f}), back -> record processed "
              f"{result.return_to_record_seconds:.2f} s, -> ready {result.return_to_ready_seconds:.2f} s")  # fmt: skip
    figures = {
        "lines_per_minute": median([r.lines_per_minute for r in runs]),
        "baseline_lines_per_minute": median([r.baseline_lines_per_minute for r in runs]),
        "return_to_record_seconds": median([r.return_to_record_seconds for r in runs]),
        "return_to_ready_seconds": median([r.return_to_ready_seconds for r in runs]),
    }
    print(f"median of {args.runs} runs, {args.outage_s:.0f} s outages: {figures['lines_per_minute']:.1f} lines per "
          f"minute of outage against {figures['baseline_lines_per_minute']:.0f} from the client alone "
          f"({figures['baseline_lines_per_minute'] / max(figures['lines_per_minute'], 1e-9):.0f}x fewer); the broker "
          f"back -> a new record processed {figures['return_to_record_seconds']:.2f} s, -> ready "
          f"{figures['return_to_ready_seconds']:.2f} s")  # fmt: skip
    write_result(directory, "outage", {"runs": [asdict(r) for r in runs], **figures, "outage_s": args.outage_s})


if __name__ == "__main__":
    main()
