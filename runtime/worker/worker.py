"""One worker: its clients, the global stores, and the session that runs its tasks.

A session starts when the clients do. Everything it runs in the background (the poll loop's tasks'
actors, the commit timer, the global-store follower) lives in one task group, and reports a failure
to the worker's `Outcome` instead of raising it: the first failure stops the worker, which then
stops every task, commits what may be committed (`Outcome.commits_at_stop`), and closes.

A stop keeps to its deadline (`runtime/worker/stop_deadline.py`): the batches in flight, the timer's
commit, the final commit, the close and the clients' stop each wait only until it, and what is
cancelled there is named in the worker's last line. A request to stop while the worker starts (its
clients retrying an unreachable broker, the global stores bootstrapping) ends the start at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from runtime.config import AppConfig, ConfigError, Guarantee
from runtime.counters import Counters
from runtime.garbage_collection import bulk_allocations, freeze_what_lives
from runtime.global_stores.stores import GlobalStores
from runtime.guarantees.commit import CommitCycle, Committer
from runtime.guarantees.consumer_commits import AtLeastOnce, AtMostOnce
from runtime.guarantees.store_checkpoints import StoreCheckpoints
from runtime.guarantees.transactions import ExactlyOnce
from runtime.guarantees.worker_transaction import WorkerTransaction
from runtime.health import HealthServer, Probes, QueryEndpoint
from runtime.kafka.aiokafka_internals import consumer_client, producer_client
from runtime.kafka.authorization import Authorization
from runtime.kafka.connection import Clients, start_with_retries
from runtime.kafka.election import Election, Singleton
from runtime.kafka.group_assignor import Membership, StandbyGroup
from runtime.kafka.outages import OUTAGES, report_outages
from runtime.kafka.outputs import Outputs
from runtime.kafka.record_limits import Limits
from runtime.kafka.session_bounds import require_session_timeout_allowed
from runtime.kafka.topic_serdes import topic_serdes
from runtime.kafka.topics import (
    InternalTopic,
    describe_limits,
    ensure_topics,
    refuse_recreating_read_topics,
    topic_uses,
)
from runtime.kafka.transactional_offsets import supports_group_fencing
from runtime.state.restore import ChangelogRestorer
from runtime.state.standbys import StandbyFollower, StandbyStores, first_inputs, state_home, stateful_tasks
from runtime.state.store_buffers import MB, StoreBuffers
from runtime.task.broadcast import BroadcastSource
from runtime.task.failures import FailureHandler
from runtime.task.task import Task, TaskServices
from runtime.telemetry import Telemetry
from runtime.worker.assignment import Assignment
from runtime.worker.backpressure import Backpressure
from runtime.worker.bounded_run import BoundedRun
from runtime.worker.levels import register_levels
from runtime.worker.outcome import Outcome
from runtime.worker.poll_loop import poll
from runtime.worker.purge import RepartitionPurge
from runtime.worker.readiness import BOOTSTRAPPING, JOINING, Readiness
from runtime.worker.stop_deadline import UNWIND_S, StopDeadline
from runtime.worker.store_queries import Session, StoreQueries
from runtime.worker.topic_watch import TopicWatch
from runtime.worker.transactional_ids import TransactionalId
from runtime.worker.unfetched import Unfetched
from stores import StoreError
from stores.rocksdb import SHARED_MEMORY

log = logging.getLogger(__name__)

T = TypeVar("T")


class WorkerFailed(RuntimeError):
    """The worker stopped because something failed, or it abandoned work to stop in time; the message says what."""


class StoppedStarting(Exception):
    """A request to stop came while the worker was starting: nothing was processed, nothing is left."""


class Worker:
    """Runs every task assigned to this process until stopped, caught up, or failed.

    `telemetry` defaults to what the app's `telemetry:` section asks for, installed as the process's
    global providers so that processors' own spans are exported too; the worker shuts that one down
    when it stops (a telemetry passed in is the caller's to shut down). `index` is the worker's under
    `--workers N` (0 to N-1), which labels its metrics.
    """

    def __init__(
        self,
        config: AppConfig,
        bootstrap_servers: str,
        until_caught_up: bool = False,
        telemetry: Telemetry | None = None,
        index: int = 0,
    ):
        self.config = config
        self._owns_telemetry = telemetry is None
        self.telemetry = telemetry or Telemetry(
            config.telemetry, config.app_id, config.group_id, worker=index, install_global=True
        )
        self.counters = Counters()
        SHARED_MEMORY.set_budget(config.rocksdb.memory_mb)
        self._clients = Clients(config, bootstrap_servers)
        self.global_stores = GlobalStores(config, self._clients, self.counters)
        self._until_caught_up = until_caught_up
        self._authorization = Authorization.of(bootstrap_servers, config.kafka, config)
        self._outcome = Outcome(self._authorization)
        self.deadline = StopDeadline(config.shutdown_timeout_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._assignment: Assignment | None = None
        self._started = time.monotonic()
        self._backpressure: Backpressure | None = None
        self._limits: Limits = {}
        self._shared: Outputs | None = None
        self._transactional: Callable[[], AIOKafkaProducer] | None = None  # the worker's transactional producer
        self._transactional_id: TransactionalId | None = None
        self.standbys: StandbyStores | None = None
        self.ready = asyncio.Event()  # set once partitions were first assigned
        self.readiness = Readiness(self._outcome, self.ready)
        self.queries = self._store_queries()
        self.telemetry.metrics.register_readiness(lambda: (self.readiness.ready, OUTAGES.unreachable))

    def stop(self) -> None:
        """Stop taking records, finish those in flight, commit, close, within the shutdown timeout. Safe
        from a signal handler and from any thread: the deadline starts now, even while a processor
        blocks the event loop, and the loop learns of the stop as soon as it runs."""
        self.deadline.start()
        if self._loop is None:
            self._outcome.stop()
        else:
            self._loop.call_soon_threadsafe(self._outcome.stop)

    def doing(self) -> list[str]:
        """What the worker is busy with, in words: the tasks inside a processor's step, else the stop's step
        in progress, else the start-up's phase. Read from the stop's watchdog thread, so it only reads."""
        assignment = self._assignment
        tasks = list(assignment.tasks.values()) if assignment is not None else []
        busy = [task.describe() for task in tasks if task.in_step is not None]
        step = self.deadline.step
        return busy or ([step()] if step is not None else [self.readiness.phase])

    @property
    def paused_partitions(self) -> set[TopicPartition]:
        return self._backpressure.paused() if self._backpressure is not None else set()

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        health = beat = None
        try:
            health = self._health_server()
            if health is not None:
                beat = asyncio.create_task(health.probes.beat(), name="health beat")
            await self._run()
        except StoppedStarting:
            log.warning("stopped while %s, before it processed anything", self.readiness.phase)
        except Exception as error:
            denied = self._authorization.translated(error)
            if denied is error:
                raise
            raise WorkerFailed(str(denied)) from error
        finally:
            if beat is not None:
                beat.cancel()
            if health is not None:
                health.stop()
            if self._owns_telemetry:
                self.telemetry.shutdown()  # exports what is still buffered
        failure = self._outcome.failure
        if failure is not None:
            if self.deadline.abandoned:
                log.error("%s", self.deadline.report())
            raise WorkerFailed(str(failure)) from failure
        if self.deadline.abandoned:
            raise WorkerFailed(self.deadline.report())

    def _health_server(self) -> HealthServer | None:
        """Serving from now until the worker has stopped, so that a probe sees it start, restore and stop."""
        config = self.config.health
        if config is None:
            return None
        probes = Probes(config.stall_s, self.readiness.reasons)
        try:
            server = HealthServer(probes, config.host, config.port, self._query_endpoint())
        except OSError as error:  # a port in use: the YAML names it, as a Prometheus port in use is told
            raise ConfigError(
                f"health.port: cannot serve the health endpoints on {config.host}:{config.port} ({error.strerror})"
            ) from error
        server.start()
        return server

    def _query_endpoint(self) -> QueryEndpoint | None:
        queries = self.config.queries
        if self.queries is None or queries is None:
            return None
        secret = queries.token.get_secret_value() if queries.token is not None else None
        try:
            return QueryEndpoint(self.queries, queries.host, secret)
        except OSError as error:  # a host name that does not resolve
            raise ConfigError(f"queries.host: cannot serve the queries on '{queries.host}' ({error})") from error

    def _store_queries(self) -> StoreQueries | None:
        queries, health = self.config.queries, self.config.health
        if queries is None or health is None:
            return None
        return StoreQueries(self.config, queries.advertised(health.port), queries.timeout_s, queries.max_items)

    async def _run(self) -> None:
        admin = self._clients.admin()
        try:  # closed however far its start got
            await self._unless_stopped(start_with_retries("admin client", self._clients.bootstrap_servers, admin.start))
            await self._unless_stopped(refuse_recreating_read_topics(admin, self.config))
            partition_counts = await self._unless_stopped(ensure_topics(admin, self.config))
            self._limits = await self._unless_stopped(describe_limits(admin, self.config, sorted(partition_counts)))
            await self._unless_stopped(require_session_timeout_allowed(admin, self.config))
        finally:
            await self.deadline.bound(admin.close(), lambda: "closing the admin client")
        self.readiness.phase = BOOTSTRAPPING
        try:
            try:
                attributes = {"kafka_actor.global_stores": sorted(self.config.global_stores)}
                with self.telemetry.tracer.span("global-store bootstrap", attributes), bulk_allocations():
                    await self._unless_stopped(self.global_stores.bootstrap(partition_counts))
            except StoreError as error:  # a refused snapshot, a store in use: the message says it all
                raise WorkerFailed(str(error)) from error
            freeze_what_lives()  # modules, clients and the global stores' tables: they live as long as the worker
            self.readiness.phase = JOINING
            await self._run_clients(partition_counts)
        finally:
            await self.deadline.bound(self.global_stores.close(), lambda: "closing the global stores")

    async def _unless_stopped(self, step: Awaitable[T]) -> T:
        """A step of the start, given up (cancelled, and `StoppedStarting` raised) when a stop comes first."""
        work = asyncio.ensure_future(step)
        stop = asyncio.ensure_future(self._outcome.stopped())
        try:
            await asyncio.wait([work, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if work.done():
            return work.result()
        work.cancel()
        await asyncio.wait([work], timeout=UNWIND_S)
        raise StoppedStarting

    def _worker_transactional_producer(self) -> AIOKafkaProducer:
        """The worker's transactional producer (KIP-447), with the id its restart takes again
        (runtime/worker/transactional_ids.py); `_transactional` builds another with the same id after a refusal
        or a fence."""
        self._transactional_id = TransactionalId(self.config)
        transactional_id = self._transactional_id.value
        self._transactional = functools.partial(
            self._clients.producer,
            transactional_id=transactional_id,
            transaction_timeout_ms=self.config.transaction_timeout_ms,
            client_id=transactional_id,
        )
        return self._transactional()

    async def _end_abandoned_transactions(self) -> None:
        """The transactions dead workers left open under the slots free now, aborted by starting a producer with
        each id: they would hold back read_committed readers until they time out."""
        assert self._transactional_id is not None
        for transactional_id in self._transactional_id.abandoned:
            producer = self._clients.producer(transactional_id=transactional_id, client_id=transactional_id)
            try:
                await producer.start()
            finally:
                await producer.stop()
            self._transactional_id.ended(transactional_id)
            log.info("ended the transaction a stopped worker may have left open under %s", transactional_id)

    async def _run_clients(self, partition_counts: dict[str, int]) -> None:
        # Under exactly-once the worker's producer is transactional, or, on a broker without KIP-447, every
        # task has its own transactional producer instead.
        exactly_once = self.config.guarantee is Guarantee.EXACTLY_ONCE
        producer = self._worker_transactional_producer() if exactly_once else self._clients.producer()
        partitions = sum(partition_counts[topic] for topic in self.config.input_topics())
        self.standbys = self._standby_stores(partition_counts)
        consumer = self._clients.group_consumer(partitions, self._membership(self.standbys))
        failures = self._failure_handler()
        bootstrap = self._clients.bootstrap_servers
        try:  # the producer stopped however far its start got
            await self._unless_stopped(start_with_retries("producer", bootstrap, producer.start))
            if exactly_once and not await supports_group_fencing(producer_client(producer)):
                log.info("the broker takes no TxnOffsetCommit v3 (KIP-447): every task gets its own transactional id")
                await producer.stop()
                producer, self._transactional = None, None
            elif exactly_once:
                await self._unless_stopped(self._end_abandoned_transactions())
            if self.standbys is not None:
                await self._unless_stopped(self.standbys.read_all())
            await self._unless_stopped(start_with_retries("consumer", bootstrap, consumer.start))
            try:
                async with asyncio.TaskGroup() as group:
                    await self._session(consumer, producer, partition_counts, group, failures)
            finally:
                if self.queries is not None:
                    self.queries.detach()
                await self.deadline.bound(consumer.stop(), lambda: "stopping the consumer (leaving the group)")
        finally:
            failures.summarise()  # the failed records counted and not yet told
            # Its stop waits until its batches are acknowledged: those for a deleted topic never are.
            if producer is not None:
                stopping = self._outcome.unless_abandoned(producer.stop())
                await self.deadline.bound(stopping, lambda: "stopping the producer (sending what it holds)")
            if self._shared is not None:  # renewed after the broker refused records
                stopping = self._outcome.unless_abandoned(self._shared.producer.stop())
                await self.deadline.bound(stopping, lambda: "stopping the renewed producer")
            if self._transactional_id is not None:
                self._transactional_id.close()
        log.info("stopped after %.1fs: %s", time.monotonic() - self._started, self.counters.snapshot())

    def _standby_stores(self, partition_counts: dict[str, int]) -> StandbyStores | None:
        tasks = stateful_tasks(self.config, partition_counts) if self.config.standby_replicas else {}
        return StandbyStores(tasks) if tasks else None

    def _membership(self, standbys: StandbyStores | None) -> Membership:
        """What this worker tells the group as it joins: its query address, and its standbys' stores."""
        membership = self.queries.membership if self.queries is not None else Membership()
        if standbys is not None:
            replicas = self.config.standby_replicas
            membership.standbys = StandbyGroup(
                replicas,
                first_inputs(self.config),
                state_home(self.config),
                standbys,
                self.config.acceptable_recovery_lag,
                self.config.probing_rebalance_interval_ms / 1000,
            )
        return membership

    async def _session(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer | None,
        partition_counts: dict[str, int],
        group: asyncio.TaskGroup,
        failures: FailureHandler,
    ) -> None:
        config, counters, outcome = self.config, self.counters, self._outcome
        shared = self._shared = self._shared_outputs(producer, partition_counts, failures)

        def spawn(work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
            return group.create_task(work, name=name)

        backpressure = self._backpressure = Backpressure(consumer, config.queue, counters)
        committer = self._committer(consumer, shared, partition_counts)
        store_checkpoints = StoreCheckpoints.configured(config, partition_counts)
        commit_cycle = CommitCycle(committer, config.commit_interval_s, store_checkpoints)
        store_buffers = StoreBuffers(config.store_buffer_mb * MB, commit_cycle.commit_soon)
        restorer = ChangelogRestorer(
            self._restore_consumer, counters, self.telemetry.tracer, committed=consumer.committed
        )
        end_offsets = await self._end_offsets(consumer, partition_counts) if self._until_caught_up else None
        serdes = self._serdes()
        services = TaskServices.of_app(
            config,
            failures,
            counters,
            serdes,
            self.global_stores.views,
            self.telemetry,
            backpressure.after_dequeue,
            committer.commit_before_processing,
        )
        services.unfetched = Unfetched(consumer, end_offsets)
        services.broadcast = self._broadcast_source(partition_counts)
        services.store_buffers = store_buffers
        assignment = self._assignment = Assignment(
            config,
            services,
            restorer.restore,
            commit_cycle,
            backpressure,
            end_offsets,
            outcome,
            counters,
            spawn,
            self.ready,
        )
        bounded_run = None
        if end_offsets is not None:
            bounded_run = BoundedRun(config, consumer, end_offsets, backpressure, assignment, commit_cycle)
        self.readiness.tasks = assignment.tasks.values
        self._serve_queries(Session(asyncio.get_running_loop(), assignment.tasks, partition_counts, serdes))
        self.readiness.records_to_restore = lambda: sum(left for _, left in list(restorer.partitions.values()))
        register_levels(
            self.telemetry.metrics,
            self.counters,
            consumer,
            assignment,
            backpressure,
            restorer,
            self.global_stores,
            self.standbys,
        )
        standbys = self._follow_standbys(spawn, backpressure)
        follower = spawn(self._supervised("following the global stores", self.global_stores.follow()), "follower")
        outages = spawn(report_outages(counters), "outage reports")
        watcher = spawn(self._watch_topics(partition_counts), "topic watch")
        elections = [
            spawn(self._supervised(election.what, election.run()), election.what)
            for election in self._elections(partition_counts)
        ]
        tasks = lambda: list(assignment.tasks.values())  # noqa: E731
        timer = spawn(self._commit_timer(commit_cycle, tasks), "commit timer")
        purge = RepartitionPurge(consumer, self._clients.admin, set(config.repartition_topics()))
        purger = spawn(purge.periodically(), "repartition purge") if config.repartition_topics() else None
        consumer.subscribe(config.input_topics(), listener=assignment)
        try:
            await self._supervised(
                "the poll loop", poll(consumer, assignment, backpressure, bounded_run, outcome, counters)
            )
        finally:
            follower.cancel()
            if standbys is not None:
                standbys.cancel()
            outages.cancel()
            watcher.cancel()
            for election in elections:
                election.cancel()  # stops its singleton here; a transaction left open is aborted by the next start
            if purger is not None:
                purger.cancel()
            await self._stop_tasks(commit_cycle, timer, assignment)
            if store_checkpoints is not None:  # the checkpoints the last commits took part in
                await self.deadline.bound(store_checkpoints.finish(), lambda: "writing the store checkpoints")
            if purger is not None:  # what the last commit passed
                await self.deadline.bound(purge.once(), lambda: "purging the repartition topics")

    def _follow_standbys(
        self, spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]], backpressure: Backpressure
    ) -> asyncio.Task[None] | None:
        if self.standbys is None:
            return None
        follower = StandbyFollower(
            self.standbys, lambda: self._clients.consumer(group_id=None, client_id=f"{self.config.app_id}-standby")
        )
        return spawn(self._supervised("following the standby stores", follower.run(backpressure)), "standbys")

    def _shared_outputs(
        self, producer: AIOKafkaProducer | None, partition_counts: dict[str, int], failures: FailureHandler
    ) -> Outputs | None:
        """The worker's output path: transactional (a refused output aborts the transaction), or with the error
        policy for a refused output; None where every task has a transactional producer of its own."""
        if producer is None:
            return None
        if self._transactional is not None:
            return Outputs(producer, partition_counts, self.counters, self._limits, self._transactional)
        return Outputs(
            producer,
            partition_counts,
            self.counters,
            self._limits,
            renew=self._clients.producer,
            on_refused=failures.refused,
        )

    def _serve_queries(self, session: Session) -> None:
        """From now until the consumer stops, the queries read this session's tasks."""
        if self.queries is not None:
            self.queries.attach(session)

    async def _stop_tasks(self, commit_cycle: CommitCycle, timer: asyncio.Task[None], assignment: Assignment) -> None:
        """The actors first, then the timer: a commit of the timer's waits for each task's turn, which a
        batch holds. The timer's commit in progress is work in flight, as a batch is; when it does not end
        in time, the final commit is not tried: it would wait for the same flush, or the same broker."""
        deadline = self.deadline
        deadline.start()
        commit_cycle.stop_timer()
        await assignment.stop_actors(deadline)
        timer_ended = await deadline.bound(timer, lambda: assignment.doing("the periodic commit in progress"), False)
        commit = timer_ended and self._outcome.commits_at_stop(self.config.guarantee is Guarantee.EXACTLY_ONCE)
        await assignment.leave_all(commit, deadline)

    async def _commit_timer(self, commit_cycle: CommitCycle, tasks: Callable[[], Iterable[Task]]) -> None:
        """Until stopped; a commit in flight is abandoned when a failure says so, as it would never end."""
        timing = self._outcome.unless_abandoned(commit_cycle.commit_periodically(tasks))
        await self._supervised("the commit timer", timing)

    async def _watch_topics(self, partition_counts: dict[str, int]) -> None:
        uses = {topic: use for topic, use in topic_uses(self.config).items() if topic in partition_counts}
        watch = TopicWatch(self._clients.admin, self._clients.bootstrap_servers, uses)
        await self._supervised("watching the app's topics", watch.run())

    def _elections(self, partition_counts: dict[str, int]) -> list[Election]:
        """The app's outboxes and table followers, each run by one process of all the app's: the one its
        election through Kafka chose. Their modules (and asyncpg) load only for an app that has some: a
        worker starts faster without."""
        config = self.config
        if not (config.outboxes or config.table_followers):
            return []
        from runtime.sources.outbox.poller import OutboxPoller
        from runtime.sources.shipper import ShippingSetup
        from runtime.sources.table_follower.follower import TableFollower

        setup = ShippingSetup(config, self._clients, partition_counts, self.counters, self._limits)
        topic, session_timeout_ms = config.singletons_topic(), config.singletons.session_timeout_ms

        def elected(what: str, kind: str, name: str, singleton: Singleton) -> Election:
            group = config.singleton_group(kind, name)
            return Election(
                what, singleton, self._clients, InternalTopic(topic), config.internal_topics, group, session_timeout_ms
            )

        return [
            *(
                elected(f"the outbox poller '{name}'", "outbox", name, OutboxPoller(name, setup))
                for name in config.outboxes
            ),
            *(
                elected(f"the table follower '{name}'", "follower", name, TableFollower(name, setup))
                for name in config.table_followers
            ),
        ]

    async def _supervised(self, what: str, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception as error:
            self._outcome.fail(error, what)

    def _committer(
        self, consumer: AIOKafkaConsumer, shared: Outputs | None, partition_counts: dict[str, int]
    ) -> Committer:
        config = self.config
        from_latest = config.kafka.consumer.get("auto_offset_reset") == "latest"
        if config.guarantee is Guarantee.EXACTLY_ONCE and shared is not None:
            return WorkerTransaction(
                consumer,
                config.group_id,
                from_latest,
                self.counters,
                self.telemetry,
                shared,
                config.transaction_timeout_ms / 1000,
            )
        if config.guarantee is Guarantee.EXACTLY_ONCE:

            def transactional_outputs(transactional_id: str) -> Outputs:
                transactional = functools.partial(
                    self._clients.producer,
                    transactional_id=transactional_id,
                    transaction_timeout_ms=config.transaction_timeout_ms,
                    client_id=transactional_id,
                )
                # A new producer, with the same transactional id, after the broker refused records.
                return Outputs(transactional(), partition_counts, self.counters, self._limits, renew=transactional)

            return ExactlyOnce(
                consumer,
                config.app_id,
                config.group_id,
                from_latest,
                self.counters,
                self.telemetry,
                transactional_outputs,
            )
        assert shared is not None
        if config.guarantee is Guarantee.AT_MOST_ONCE:
            return AtMostOnce(consumer, shared, self.counters, self.telemetry)
        return AtLeastOnce(consumer, shared, self.counters, self.telemetry)

    def _failure_handler(self) -> FailureHandler:
        return FailureHandler.configured(self.config, self.counters, self._limits)

    def _serdes(self) -> dict[str, tuple[Any, Any]]:
        return topic_serdes(self.config)

    async def _end_offsets(
        self, consumer: AIOKafkaConsumer, partition_counts: dict[str, int]
    ) -> dict[TopicPartition, int]:
        inputs = self.config.input_topics()
        tps = [TopicPartition(topic, p) for topic in inputs for p in range(partition_counts[topic])]
        # The consumer learns of its topics when it subscribes, after this: asked before, aiokafka finds
        # the partitions unknown and retries after retry_backoff_ms (100 ms of a run's start-up).
        await asyncio.gather(*(consumer_client(consumer).add_topic(topic) for topic in inputs))
        return dict(await consumer.end_offsets(tps))

    def _broadcast_source(self, partition_counts: dict[str, int]) -> BroadcastSource | None:
        topics = self.config.broadcast_topics()
        if not topics:
            return None
        return BroadcastSource(
            {topic: partition_counts[topic] for topic in topics},
            lambda client_id: self._clients.consumer(group_id=None, client_id=client_id),
            self.config.queue,
            self.config.kafka.consumer.get("auto_offset_reset") == "latest",
            self.config.guarantee is Guarantee.EXACTLY_ONCE,
            self.counters,
        )

    def _restore_consumer(self) -> AIOKafkaConsumer:
        return self._clients.consumer(group_id=None, client_id=f"{self.config.app_id}-restore")
