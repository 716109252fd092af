"""The engine: CLI, config, workers, consumer loop, actors, outputs, commits and telemetry."""
