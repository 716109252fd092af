"""The topics an app uses: those it declares, its stores' changelogs and its global stores' topics."""

from __future__ import annotations

from runtime.config import AppConfig


def changelog_topics(app: AppConfig) -> dict[str, str]:
    """Changelog topic -> its store."""
    return {
        app.changelog_topic(store): store
        for processor in app.processors
        for store, spec in processor.stores.items()
        if spec.changelog
    }


def app_topics(app: AppConfig) -> list[str]:
    return sorted({*app.topics, *changelog_topics(app), *(spec.topic for spec in app.global_stores.values())})


def intermediate_topics(app: AppConfig) -> set[str]:
    """The topics the app writes and reads itself: one processor's outputs, another's inputs."""
    written = {topic for processor in app.processors for topic in processor.outputs}
    return {topic for processor in app.processors for topic in processor.inputs if topic in written}
