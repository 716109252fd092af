"""An app's `replay_jobs`: where requests arrive, where jobs' states live, and how a worker runs them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ReplayJobsConfig(BaseModel):
    """Read by `python -m runtime replay-jobs serve`; every field has a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_topic: str | None = None  # default <app_id>-replay-requests
    jobs_topic: str | None = None  # default <app_id>-replay-jobs (compacted, one partition)
    max_jobs: int = Field(default=4, ge=1)  # run at once by one worker
    heartbeat_ms: int = Field(default=1_000, ge=10)
    takeover_after_ms: int = Field(default=10_000, ge=100)

    @model_validator(mode="after")
    def _heartbeats_come_before_takeover(self) -> ReplayJobsConfig:
        if self.takeover_after_ms < 3 * self.heartbeat_ms:
            raise ValueError(
                f"takeover_after_ms ({self.takeover_after_ms}) must be at least 3 heartbeats "
                f"({3 * self.heartbeat_ms}): a job whose worker runs would be taken from it"
            )
        return self
