"""`--workers N`: N worker processes in one consumer group, restarted when they die, stopped together.

A worker that exits 0 (a `--until-caught-up` run finished) is done. One that exits 2 met an error in
the app's configuration, which a restart would meet again: the supervisor stops the others and exits 2.
One that dies otherwise (a non-zero status, or killed by a signal) is restarted as `restarts.py`
decides, and when it decides against, the supervisor stops the others and exits 1.

SIGINT and SIGTERM are forwarded to every worker, which commits and exits 0 (1 when it had to abandon
work to stop within its shutdown timeout); one still running `STOP_MARGIN_S` after the time its own
stop may take (`stop_grace_s`) is killed. A worker that the forwarded signal ended before it installed its
handler (still starting, or already closed) had nothing to commit, and counts as stopped cleanly.

The exit status is 0 when every worker's last run ended cleanly, 2 when one reported a configuration
error, and 1 when one failed or was killed and was not restarted (the log names the signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path

from runtime.config import AppConfig
from runtime.worker.restarts import RestartPolicy, Restarts
from runtime.worker.stop_deadline import FINAL_S, WATCHDOG_S

log = logging.getLogger(__name__)

WORKER_INDEX = "KAFKA_ACTOR_WORKER_INDEX"
"""The environment variable that tells each of the N processes which one it is (0 to N-1)."""

EXIT_FAILED = 1
EXIT_CONFIG = 2
STOP_MARGIN_S = 5.0


def stop_grace_s(shutdown_timeout_s: float) -> float:
    """How long a worker asked to stop may run before it is killed: what its own stop deadline allows,
    watchdog included, and a margin; a backstop only, as the worker's watchdog ends it first."""
    return shutdown_timeout_s + FINAL_S + WATCHDOG_S + STOP_MARGIN_S


def run_workers(
    count: int,
    app: Path,
    bootstrap: str,
    until_caught_up: bool,
    logging_options: list[str],
    policy: RestartPolicy,
    shutdown_timeout_s: float,
) -> int:
    command = [sys.executable, "-m", "runtime", str(app), *logging_options]
    if until_caught_up:
        command.append("--until-caught-up")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    return asyncio.run(Supervisor(command, env, count, policy, stop_grace_s(shutdown_timeout_s)).run())


def describe_exit(code: int) -> str:
    """How a process ended, from its return code (negative: the signal that killed it), by name."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}"


def signal_process(process: asyncio.subprocess.Process, signum: signal.Signals) -> None:
    """`os.kill` rather than `Process.send_signal`, which polls the child first: that poll can reap a
    worker that just died before asyncio's child watcher does, which then reports exit 255 instead of
    the signal that killed it. A dead child not yet reaped is still a zombie, so its pid is not reused."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signum)


class Supervisor:
    """Starts the workers, restarts those that die, and stops them all on a signal or when one cannot go on."""

    def __init__(self, command: list[str], env: dict[str, str], count: int, policy: RestartPolicy, stop_grace_s: float):
        self._command = command
        self._stop_grace_s = stop_grace_s
        self._env = env
        self._count = count
        self._policy = policy
        self._running: dict[int, asyncio.subprocess.Process] = {}
        self._stop_requested = asyncio.Event()
        self._stop_signals: list[signal.Signals] = []  # the signals sent to stop the workers, in order
        self._kill_timer: asyncio.TimerHandle | None = None
        self._exit_status = 0

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stop, signum)
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(self._count):
                    group.create_task(self._supervise(index))
        finally:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._send(signal.SIGKILL)  # only running when the supervisor itself failed
        return self._exit_status

    def stop(self, signum: signal.Signals = signal.SIGTERM) -> None:
        """Send `signum` to every worker, start none again, and kill those still running after the grace."""
        self._stop_signals.append(signum)
        self._stop_requested.set()
        self._send(signum)
        if self._kill_timer is None:
            self._kill_timer = asyncio.get_running_loop().call_later(self._stop_grace_s, self._kill)

    def _kill(self) -> None:
        grace = self._stop_grace_s
        for index, process in self._running.items():
            if process.returncode is None:
                log.error("worker %d (pid %d) did not stop in %.0f s; killing it", index, process.pid, grace)
        self._send(signal.SIGKILL)

    def _send(self, signum: signal.Signals) -> None:
        for process in self._running.values():
            if process.returncode is None:  # one that exited is gone: its supervising task has yet to see it
                signal_process(process, signum)

    async def _supervise(self, index: int) -> None:
        """Runs worker `index` until it is done, given up on, or the group stops; its last run's end counts."""
        restarts = Restarts(self._policy)
        code = 0
        while not self._stop_requested.is_set():
            started = time.monotonic()
            pid, code = await self._run(index)
            name = f"worker {index} (pid {pid})"
            if code == 0:
                log.info("%s %s", name, describe_exit(code))
                break
            if self._stop_requested.is_set():
                if -code in self._stop_signals:
                    log.info("%s %s, as asked", name, describe_exit(code))
                    code = 0
                else:
                    log.error("%s %s while the workers stopped", name, describe_exit(code))
                break
            if code == EXIT_CONFIG:
                log.error("%s %s (an error in the app's configuration); stopping", name, describe_exit(code))
                self.stop()
                break
            delay = restarts.after_death(time.monotonic() - started)
            if delay is None:
                log.error(
                    "%s %s: %d deaths in a row, each less than %.0f s after a restart (--max-restarts %d); stopping",
                    name,
                    describe_exit(code),
                    restarts.deaths_in_a_row,
                    self._policy.healthy_after_s,
                    self._policy.max_restarts,
                )
                self.stop()
                break
            log.warning("%s %s; restarting it in %.0f s", name, describe_exit(code), delay)
            if await self._stop_requested_within(delay):
                log.error("%s %s and is not restarted: the workers are stopping", name, describe_exit(code))
        self._exit_status = max(self._exit_status, code if code in (0, EXIT_CONFIG) else EXIT_FAILED)

    async def _run(self, index: int) -> tuple[int, int]:
        """Runs worker `index` once: its pid and return code."""
        process = await asyncio.create_subprocess_exec(*self._command, env={**self._env, WORKER_INDEX: str(index)})
        self._running[index] = process
        if self._stop_requested.is_set() and process.returncode is None:  # asked while it was being started
            signal_process(process, self._stop_signals[-1])
        log.info("worker %d started (pid %d)", index, process.pid)
        code = await process.wait()
        del self._running[index]
        return process.pid, code

    async def _stop_requested_within(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                await self._stop_requested.wait()
        except TimeoutError:
            return False
        return True


def for_worker(config: AppConfig, index: int) -> AppConfig:
    """The config of worker `index` of `--workers N`: its Prometheus and health endpoints on the configured
    ports plus its index, so that the N processes on one host do not all try to bind one port, and its
    group instance id with its index appended, so that they do not fence each other out of the group."""
    update: dict[str, object] = {}
    instance = config.kafka.group_instance_id
    if instance is not None:
        update["kafka"] = config.kafka.model_copy(update={"group_instance_id": f"{instance}-{index}"})
    if not index:
        return config.model_copy(update=update)
    metrics = config.telemetry.metrics
    if metrics.exporter == "prometheus":
        metrics = metrics.model_copy(update={"port": metrics.port + index})
        update["telemetry"] = config.telemetry.model_copy(update={"metrics": metrics})
    if config.health is not None:
        update["health"] = config.health.model_copy(update={"port": config.health.port + index})
    return config.model_copy(update=update)
