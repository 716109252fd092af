"""One task assembled from its processor's config: the same for a worker, the test kit and the tests.

A task's processor is constructed (a constructor that raises stops the worker), its stores are made
(opened later: a worker restores them first), its broadcast inputs get a reader of their own where the
services have a source for them (the test kit delivers broadcast records itself), and its context is
bound to the app's topics, stores and limits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition

from processors.processor import Processor
from runtime.config import AppConfig, ProcessorConfig
from runtime.config.processors import ConcurrencyConfig
from runtime.errors import StopAfterCommit
from runtime.kafka.outputs import Outputs
from runtime.state.task_state import TaskState
from runtime.task.broadcast import BroadcastReader
from runtime.task.context import TaskContext
from runtime.task.task import Task, TaskId, TaskServices
from runtime.task.upstream_progress import UpstreamProgress, progress_of, stamps_of

log = logging.getLogger(__name__)


def assemble_task(
    config: AppConfig,
    spec: ProcessorConfig,
    task_id: TaskId,
    inputs: list[TopicPartition],
    outputs: Outputs,
    services: TaskServices,
    end_offsets: Mapping[TopicPartition, int] | None = None,
) -> Task:
    """Processor `spec`'s task on `task_id.partition`, reading `inputs`, writing through `outputs`."""
    processor = construct(spec, task_id)
    state = None
    if spec.stores or spec.tables:
        state = TaskState(config, spec, task_id.partition, outputs, services.serdes, services.store_buffers)
    broadcast = None
    if spec.broadcast and services.broadcast is not None:
        assert state is not None  # the config adds the store of the broadcast positions
        store = spec.broadcast_positions_store
        client_id = f"{config.app_id}-{task_id.processor}-{task_id.partition}-broadcast"
        broadcast = services.broadcast.reader(spec.broadcast, lambda: state.stores[store].store, client_id)
    task = build_task(
        task_id,
        processor,
        config.app_id,
        spec.params,
        frozenset(spec.outputs),
        inputs,
        outputs,
        services,
        end_offsets,
        state,
        broadcast,
        spec.concurrency,
        progress_of(config, spec, outputs),
    )
    task.stamps = stamps_of(config, spec, task_id.partition, outputs, services.clock, end_offsets is not None)
    return task


def construct(spec: ProcessorConfig, task_id: TaskId) -> Processor:
    """The task's processor instance; one that cannot be constructed stops the worker with the cause."""
    try:
        return spec.processor_class()()
    except Exception as error:
        log.error("processor '%s' could not be constructed for task %s", spec.name, task_id, exc_info=error)
        raise StopAfterCommit(
            f"processor '{spec.name}' could not be constructed for task {task_id}: {type(error).__name__}: {error}"
        ) from error


def build_task(
    task_id: TaskId,
    processor: Processor,
    app_id: str,
    params: Mapping[str, Any],
    outputs_allowed: frozenset[str],
    inputs: list[TopicPartition],
    outputs: Outputs,
    services: TaskServices,
    end_offsets: Mapping[TopicPartition, int] | None,
    state: TaskState | None = None,
    broadcast: BroadcastReader | None = None,
    concurrency: ConcurrencyConfig | None = None,
    upstream: UpstreamProgress | None = None,
) -> Task:
    context = TaskContext(
        app_id,
        task_id.processor,
        task_id.partition,
        params,
        outputs_allowed,
        services.serdes,
        services.global_stores,
        state,
        outputs.limits,
        services.counters,
        services.clock,
    )
    if state is not None:
        state.stream_clock = context
    if upstream is not None:  # held from the start, until every upstream task stamped
        context.upstream = upstream
        context.hold_at(upstream.watermark)
    return Task(task_id, processor, context, inputs, outputs, services, end_offsets, state, broadcast, concurrency)
