"""When a worker of `--workers N` that died is started again, and when the supervisor gives up on it.

A worker that dies is started again after `first_delay_s` (1 s), doubled for each further death in a
row, up to `max_delay_s` (30 s). A death counts as one in a row when the run it ended lasted less than
`healthy_after_s` (a minute) since its restart; a longer run resets the count, so a worker that dies
once a day is always restarted after a second. When a worker's last `max_restarts` (5) restarts each
ended in such a death, the supervisor gives up on it and stops the group. Counting deaths in a row
rather than deaths per minute ends a crash loop however long a start takes: the backoff can never
spread the deaths so thin that no minute holds enough of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5
    healthy_after_s: float = 60.0
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0


class Restarts:
    """One worker's deaths in a row, and the wait before its next start."""

    def __init__(self, policy: RestartPolicy):
        self.policy = policy
        self.deaths_in_a_row = 0

    def after_death(self, ran_for_s: float) -> float | None:
        """Seconds to wait before starting the worker again, or None when it is not to be restarted."""
        healthy = ran_for_s >= self.policy.healthy_after_s
        self.deaths_in_a_row = 1 if healthy else self.deaths_in_a_row + 1
        if self.deaths_in_a_row > self.policy.max_restarts:
            return None
        return min(self.policy.first_delay_s * 2.0 ** (self.deaths_in_a_row - 1), self.policy.max_delay_s)
