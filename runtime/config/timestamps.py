"""`topics.<name>.timestamp`: where a topic's records carry their event time, when not in the Kafka timestamp."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from stores.serdes import import_object


class TimestampConfig(BaseModel):
    """Exactly one of `field` (a dotted path into the decoded value) or `extractor` (`module:function`,
    given the decoded `processors.Record`); either gives epoch milliseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str | None = None
    extractor: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TimestampConfig:
        if (self.field is None) == (self.extractor is None):
            raise ValueError("give exactly one of `field` (a field of the value) or `extractor` (module:function)")
        return self

    @field_validator("field")
    @classmethod
    def _dotted_path(cls, path: str | None) -> str | None:
        if path is not None and not all(path.split(".")):
            raise ValueError(f"'{path}' is not a field name or a dotted path of them, like 'event.time'")
        return path

    @field_validator("extractor")
    @classmethod
    def _callable(cls, path: str | None) -> str | None:
        """Imported now, so a wrong path is a configuration error rather than a failure of every record."""
        if path is None:
            return path
        try:
            found = import_object(path)
        except Exception as error:  # a user module may fail in any way: report it at its YAML path
            reason = str(error) if isinstance(error, ImportError) else f"{type(error).__name__}: {error}"
            raise ValueError(f"cannot import timestamp extractor '{path}': {reason}") from None
        if not callable(found):
            raise ValueError(f"'{path}' is not a function of a record")
        return path
