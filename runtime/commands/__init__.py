"""The commands of `python -m runtime <command>` besides running an app.

Each is a module with `main(argv) -> int`, imported only when its command runs, so running an app
pays nothing for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

# Command name -> (module, what it does, for the top-level --help).
COMMANDS: dict[str, tuple[str, str]] = {
    "dev-kafka": ("runtime.devkafka.cli", "start, stop or check the local development broker"),
    "dev-postgres": ("runtime.devpostgres.cli", "start, stop or check the local development PostgreSQL"),
    "topics": ("runtime.commands.topics", "list, describe or create topics"),
    "produce": ("runtime.commands.produce", "write JSON lines to a topic, encoded with its serdes"),
    "consume": ("runtime.commands.consume", "print a topic's records as JSON lines, decoded with its serdes"),
    "describe": ("runtime.commands.describe", "an app's topology: processors, topics, stores, internal topics"),
    "reset": ("runtime.commands.reset", "move an app's committed offsets; optionally delete its state"),
    "replay": ("replay.cli", "one key's records (or a partition's) in a time range, from its partition only"),
    "checkpoint": ("rewind.checkpoint_cli", "checkpoint the running app's stores now, or list its checkpoints"),
    "rewind": ("rewind.cli", "take a stopped app back to a checkpoint, to process its inputs again from there"),
    "replay-jobs": ("replay.jobs.cli", "run replay jobs that outlive their worker, request one, list them"),
}


def run_command(name: str, argv: list[str]) -> int:
    main: Callable[[list[str]], int] = importlib.import_module(COMMANDS[name][0]).main
    return main(argv)


def summary() -> str:
    """The commands and what each does, for the top-level --help."""
    width = max(map(len, COMMANDS))
    return "commands (each with --help):\n" + "\n".join(
        f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()
    )
