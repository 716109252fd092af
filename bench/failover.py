"""Failover: a worker owning a big store killed -9, and how soon its partitions write again from the other
worker; the runtime without standbys, with one, and Kafka Streams with `num.standby.replicas=1`.

`python -m bench.failover [--keys 1000000] [--runs 3] [--rate 300] [--partitions 6] [--systems ...]`

One input topic is loaded once with `--keys` records of distinct keys; each system's counting app (one
RocksDB store with a changelog; the runtime's `bench.processors:StampedCount`, Kafka Streams'
`bench/peers/kafka_streams` FailoverPeer) counts it with two worker processes, each with a state directory
of its own, so its store holds `--keys` keys. Then, with `--rate` records/s flowing to every partition, each
round kills -9 the worker owning the most partitions (the last to write each partition's outputs owns it),
and times from the kill to each of its partitions' first output written by the other worker (every output
names its worker and when it was made; an output lands in its input's partition). The killed worker is
then restarted and the round ends once it has caught up: every partition's copy in the state directory of
the worker not running it within `CAUGHT_UP_LAG` records of its changelog's end (without standbys: once
it writes outputs again). Both systems use the same consumer session: timeout 3 s, heartbeat 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgpack
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError

from bench.app import REPO_ROOT, AppSpec, LoggedProcess, RuntimeProcess, python_path
from bench.broker import create_topics, delete_topics, end_offsets, kafka
from bench.data import fill_topic
from bench.load import PacedProducer
from bench.peers import environments
from bench.stateful import count_store
from bench.stats import median, run_directory, write_result
from stores.rocksdb import stored_offset

WORKERS = ("w0", "w1")
SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS = 3000, 1000
CAUGHT_UP_LAG = 10_000  # per partition, Kafka Streams' acceptable.recovery.lag
STORE = "counts"
RUNTIME_0, RUNTIME_1, KAFKA_STREAMS = "runtime standbys 0", "runtime standbys 1", "kafka-streams standbys 1"
SYSTEMS = (RUNTIME_0, RUNTIME_1, KAFKA_STREAMS)


@dataclass(frozen=True)
class Takeover:
    seconds: float  # from the kill to the last of the killed worker's partitions writing from the other
    first_s: float  # to the first of them
    partitions: int  # the killed worker owned
    catch_up_s: float  # from the restart to the restarted worker caught up


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys loaded into the store")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=300.0, help="input records per second during the rounds")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting a local broker")
    return parser.parse_args()


class Outputs:
    """The output topic from its end on: per partition, (worker, when made) of each output."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, decode: Callable[[bytes], Any]) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._decode = decode
        self.made: dict[int, list[tuple[str, float]]] = {p: [] for p in range(partitions)}

    async def __aenter__(self) -> Outputs:
        await self._consumer.start()
        self._consumer.assign(self._partitions)
        await self._consumer.seek_to_end(*self._partitions)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._consumer.stop()

    async def poll_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for tp, records in (await self._consumer.getmany(timeout_ms=100)).items():
                for record in records:
                    value = self._decode(record.value)
                    self.made[tp.partition].append((str(value["worker"]), float(value["at"])))

    def owners(self, since: float) -> dict[int, str]:
        """The worker that wrote each partition's last output, of those written since `since`."""
        return {p: made[-1][0] for p, made in self.made.items() if made and made[-1][1] >= since}

    def first_by(self, worker: str, partition: int, after: float) -> float | None:
        return next((at for w, at in self.made[partition] if w == worker and at > after), None)


class System(ABC):
    """One system's counting app: its two workers' processes, and where each keeps its copy of a partition."""

    name: str
    standbys: int

    def __init__(self, bootstrap: str, app_id: str, input_topic: str, output_topic: str, workdir: Path) -> None:
        self.bootstrap, self.app_id, self.workdir = bootstrap, app_id, workdir
        self.input_topic, self.output_topic = input_topic, output_topic
        self._starts: Counter[str] = Counter()

    def state_dir(self, worker: str) -> Path:
        return self.workdir / f"{self.app_id}-{worker}-state"

    @abstractmethod
    def start(self, worker: str) -> LoggedProcess: ...

    def started_file(self, worker: str, suffix: str) -> Path:
        """A file of the worker's next start (its YAML, its log): a restart keeps the killed one's log."""
        self._starts[worker] += 1
        return self.workdir / f"{self.app_id}-{worker}-{self._starts[worker]}{suffix}"

    @abstractmethod
    def decode(self, value: bytes) -> Any: ...

    @abstractmethod
    def drop_leftovers(self, worker: str, partitions: list[int]) -> None:
        """Without standbys, delete the worker's copies of partitions it does not run, left from when it ran
        them (the first worker to join runs all partitions for a while), so that a takeover restores from
        the changelog's start, as on a worker that never held them."""

    @abstractmethod
    def copy_position(self, worker: str, partition: int) -> int | None:
        """The changelog offset the worker's copy of the partition's store holds, if it has one."""

    @property
    def changelog(self) -> str:
        return f"{self.app_id}-{STORE}-changelog"


class Runtime(System):
    def __init__(self, standbys: int, partitions: int, *args: Any) -> None:
        self.standbys = standbys
        self.name = RUNTIME_1 if standbys else RUNTIME_0
        super().__init__(*args)
        spec = AppSpec(
            app_id=self.app_id,
            bootstrap=self.bootstrap,
            input_topic=self.input_topic,
            output_topic=self.output_topic,
            partitions=partitions,
            processor_class="bench.processors:StampedCount",
            processor_name="count",
            stores=count_store("rocksdb"),
        )
        self._base = spec.to_yaml() | {"standby_replicas": standbys}
        self._base["kafka"]["consumer"] = {
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        }

    def start(self, worker: str) -> LoggedProcess:
        app = yaml.safe_load(yaml.safe_dump(self._base))
        app["state_dir"] = str(self.state_dir(worker))
        app["processors"][0]["params"]["worker"] = worker
        path = self.started_file(worker, ".yaml")
        path.write_text(yaml.safe_dump(app, sort_keys=False))
        return RuntimeProcess(path)

    def decode(self, value: bytes) -> Any:
        return msgpack.unpackb(value)

    def drop_leftovers(self, worker: str, partitions: list[int]) -> None:
        if self.standbys == 0:
            for partition in partitions:
                shutil.rmtree(self.state_dir(worker) / self.app_id / STORE / str(partition), ignore_errors=True)

    def copy_position(self, worker: str, partition: int) -> int | None:
        return stored_offset(self.state_dir(worker) / self.app_id / STORE / str(partition))


class KafkaStreams(System):
    name = KAFKA_STREAMS
    standbys = 1

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._command = environments.kafka_streams_command(environments.FAILOVER_MAIN)

    def start(self, worker: str) -> LoggedProcess:
        options = {
            "group": self.app_id,
            "bootstrap": self.bootstrap,
            "state-dir": str(self.state_dir(worker)),
            "input": self.input_topic,
            "output": self.output_topic,
            "worker": worker,
            "standbys": str(self.standbys),
            "session-timeout-ms": str(SESSION_TIMEOUT_MS),
            "heartbeat-interval-ms": str(HEARTBEAT_INTERVAL_MS),
        }
        arguments = [part for name, value in options.items() for part in (f"--{name}", value)]
        env = {**os.environ, "PYTHONPATH": python_path(REPO_ROOT)}
        log = self.started_file(worker, ".log")
        return LoggedProcess([*self._command, *arguments], log, REPO_ROOT, env)

    def decode(self, value: bytes) -> Any:
        return json.loads(value)

    def drop_leftovers(self, worker: str, partitions: list[int]) -> None:
        """With a standby everywhere, what the worker keeps of the partitions is the standby."""

    def copy_position(self, worker: str, partition: int) -> int | None:
        """As FailoverPeer writes it: Kafka Streams tells a standby's position only to its listener."""
        try:
            return int((self.state_dir(worker) / "standby-positions" / str(partition)).read_text())
        except (OSError, ValueError):
            return None


async def committed_total(bootstrap: str, group: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except GroupCoordinatorNotAvailableError:  # before the group's first join
        return 0
    finally:
        await admin.close()
    return sum(meta.offset for meta in offsets.values() if meta.offset >= 0)


async def wait_counted(system: System, total: int, timeout_s: float) -> float:
    started = time.monotonic()
    while await committed_total(system.bootstrap, system.app_id) < total:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{system.app_id} did not count the {total:,} loaded records in {timeout_s:.0f}s")
        await asyncio.sleep(1)
    return time.monotonic() - started


async def caught_up(system: System, outputs: Outputs, restarted: str, since: float, partitions: int) -> bool:
    """Every partition writing again since the restart and, with standbys, every copy beside the partition's
    runner within CAUGHT_UP_LAG of its changelog's end."""
    owners = outputs.owners(since)
    if len(owners) < partitions:
        return False
    if system.standbys == 0:
        return restarted in owners.values()
    ends = await end_offsets(system.bootstrap, system.changelog)
    for partition, owner in owners.items():
        other = WORKERS[1 - WORKERS.index(owner)]
        position = system.copy_position(other, partition)
        if position is None or ends[partition] - position > CAUGHT_UP_LAG:
            return False
    return True


async def rounds(system: System, args: argparse.Namespace, processes: dict[str, LoggedProcess]) -> list[Takeover]:
    takeovers = []
    async with Outputs(system.bootstrap, system.output_topic, args.partitions, system.decode) as outputs:
        await outputs.poll_for(5.0)
        for number in range(1, args.runs + 1):
            owners = outputs.owners(time.time() - 3.0)
            victim = Counter(owners.values()).most_common(1)[0][0]
            owned = sorted(p for p, w in owners.items() if w == victim)
            survivor = WORKERS[1 - WORKERS.index(victim)]
            system.drop_leftovers(survivor, owned)
            killed = time.time()
            processes[victim].process.send_signal(signal.SIGKILL)
            processes[victim].process.wait()
            deadline = time.monotonic() + 180
            firsts: dict[int, float] = {}
            while len(firsts) < len(owned):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"partitions {owned} wrote nothing from {survivor} within 180s of the kill")
                await outputs.poll_for(0.2)
                for p in owned:
                    if p not in firsts and (at := outputs.first_by(survivor, p, killed)) is not None:
                        firsts[p] = at - killed
            restarted = time.time()
            processes[victim] = system.start(victim)
            deadline = time.monotonic() + 600
            while True:
                await outputs.poll_for(2.0)
                if await caught_up(system, outputs, victim, restarted, args.partitions):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{victim} did not catch up within 600s of its restart")
            takeover = Takeover(max(firsts.values()), min(firsts.values()), len(owned), time.time() - restarted)
            print(f"  {system.name} round {number}/{args.runs}: {describe(takeover)}", flush=True)
            takeovers.append(takeover)
            await outputs.poll_for(3.0)
    return takeovers


def describe(takeover: Takeover) -> str:
    return (
        f"{takeover.partitions} partitions written again from the other worker {takeover.seconds:5.2f} s after "
        f"the kill (the first {takeover.first_s:5.2f} s); restarted worker caught up in {takeover.catch_up_s:5.1f} s"
    )


def run_system(name: str, bootstrap: str, input_topic: str, args: argparse.Namespace, workdir: Path) -> list[Takeover]:
    suffix = uuid.uuid4().hex[:8]
    output_topic = f"bench-failover-out-{suffix}"
    asyncio.run(create_topics(bootstrap, {output_topic: args.partitions}))
    topics = (bootstrap, f"bench-failover-{suffix}", input_topic, output_topic, workdir)
    systems: dict[str, Callable[[], System]] = {
        RUNTIME_0: lambda: Runtime(0, args.partitions, *topics),
        RUNTIME_1: lambda: Runtime(1, args.partitions, *topics),
        KAFKA_STREAMS: lambda: KafkaStreams(*topics),
    }
    system = systems[name]()
    processes = {worker: system.start(worker) for worker in WORKERS}
    try:
        counted = asyncio.run(wait_counted(system, args.keys, timeout_s=3600))
        print(f"{name}: {args.keys:,} keys counted in {counted:.0f} s", flush=True)

        async def measure() -> list[Takeover]:
            producer = PacedProducer(bootstrap, input_topic, args.partitions, args.rate)
            feeding = asyncio.create_task(producer.run())
            try:
                return await rounds(system, args, processes)
            finally:
                producer.stop.set()
                await feeding

        return asyncio.run(measure())
    finally:
        for process in processes.values():
            process.terminate()
        for worker in WORKERS:
            shutil.rmtree(system.state_dir(worker), ignore_errors=True)
        asyncio.run(delete_topics(bootstrap, [output_topic, system.changelog]))


def main() -> None:
    args = parse_args()
    workdir = run_directory("failover")
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    with kafka(args.bootstrap) as bootstrap:
        input_topic = f"bench-failover-in-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topics(bootstrap, {input_topic: args.partitions}))
        rate = asyncio.run(fill_topic(bootstrap, input_topic, args.keys, args.partitions, keys=args.keys))
        print(f"loaded {args.keys:,} records of distinct keys ({rate:,.0f} rec/s)", flush=True)
        runs = {name: run_system(name, bootstrap, input_topic, args, workdir) for name in args.systems}
        asyncio.run(delete_topics(bootstrap, [input_topic]))
    summary = {
        name: {field: median([getattr(t, field) for t in takeovers]) for field in Takeover.__dataclass_fields__}
        for name, takeovers in runs.items()
    }
    print(
        f"median of {args.runs}, {args.keys:,} keys, {args.partitions} partitions, {args.rate:,.0f} rec/s in, "
        f"session timeout {SESSION_TIMEOUT_MS} ms, heartbeat {HEARTBEAT_INTERVAL_MS} ms:"
    )
    for name, figures in summary.items():
        print(
            f"  {name:24}: killed worker's partitions written again after {figures['seconds']:.2f} s "
            f"(first {figures['first_s']:.2f} s), caught up after restart {figures['catch_up_s']:.1f} s"
        )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    path = write_result(
        workdir,
        "failover",
        {
            "keys": args.keys,
            "rate": args.rate,
            "partitions": args.partitions,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "runs": {name: list(map(asdict, takeovers)) for name, takeovers in runs.items()},
            "median": summary,
        },
    )
    print(f"result: {path.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
