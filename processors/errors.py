"""What a processor raises to stop the app rather than have its error policy handle the failure."""

from __future__ import annotations


class StopWorker(Exception):
    """Retrying cannot help, and the message says all the user needs (a database that refused the app's
    certificate or credentials): raised from any of a processor's methods, under every error policy, it stops
    the worker as a processor failing under `fail` does, with exit 1 and the message as its one line, no
    traceback and no record skipped or dead-lettered."""
