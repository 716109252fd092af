"""A task's stores: their changelogs, restores and snapshot ingestion."""
