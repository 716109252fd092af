"""What the engine does about a failure, told by the failure's class rather than by where it came from.

Each class names an action. The worker stops the same way whichever part of it raised one, so a new
kind of failure picks its class here instead of adding a case to the shutdown.
"""

from __future__ import annotations


class EngineError(Exception):
    """A failure the engine knows how to handle; its message is already phrased for the user."""


class TaskLost(EngineError):
    """Another worker owns the task now (its producer was fenced): drop the task, commit nothing for it,
    and go on with the others."""


class StopAfterCommit(EngineError):
    """Stop the worker, committing the work done before the failure: a record or a processor failed
    under the `fail` policy, and everything before it is complete."""


class StopWithoutCommit(EngineError):
    """Stop the worker and commit nothing more: the output path or a transaction broke, so a commit
    could claim outputs that were never written."""


class StopAbandoningCommit(StopWithoutCommit):
    """Stop the worker and commit nothing more, abandoning a commit in flight too: a topic it uses is gone,
    and the clients wait for it to come back rather than fail, so that commit would never end."""


class AccessDenied(EngineError):
    """Kafka's authorizer refused the app's principal an operation: stop without committing, as no retry can
    succeed until an ACL grants it."""

    def __init__(self, broker: str, principal: str, operation: str, resource: str, name: str):
        super().__init__(
            f"Kafka at {broker} refused {principal} {operation} on {resource} '{name}': grant it "
            "(python -m runtime acls app.yaml lists every ACL the app needs)"
        )
