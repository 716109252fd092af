"""The `params` of the built-in `Aggregate` processor, checked when the app YAML is loaded, so that a
mistake is an error naming its field (`processors[0].params.window.size_ms: ...`) before anything runs.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from processors.keyless import Keyless
from processors.params import among_outputs
from processors.windows.aggregations import (
    NEEDS_FIELD,
    SIMPLE,
    Aggregation,
    CappedList,
    Custom,
    import_aggregator,
)
from processors.windows.counted import Counted, count_field
from processors.windows.definitions import Hopping, Session, Sliding, Tumbling, WindowDefinition
from processors.windows.several import SeveralAggregations

# The durations each window type takes besides `grace_ms`.
WINDOW_DURATIONS: Final = {
    "tumbling": ("size_ms",),
    "hopping": ("size_ms", "advance_ms"),
    "sliding": ("time_difference_ms",),
    "session": ("gap_ms",),
}
WINDOW_CLASSES: Final[dict[str, type[WindowDefinition]]] = {
    "tumbling": Tumbling,
    "hopping": Hopping,
    "sliding": Sliding,
    "session": Session,
}
AGGREGATIONS: Final = (*SIMPLE, "list")
STORE_NAME: Final = r"^[a-zA-Z0-9_-]+$"

PositiveMs = Annotated[int, Field(gt=0)]
PositiveCount = Annotated[int, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WindowParams(_Strict):
    type: Literal["tumbling", "hopping", "sliding", "session", "count"]
    size_ms: PositiveMs | None = Field(default=None, validate_default=True)
    advance_ms: PositiveMs | None = Field(default=None, validate_default=True)
    time_difference_ms: PositiveMs | None = Field(default=None, validate_default=True)
    gap_ms: PositiveMs | None = Field(default=None, validate_default=True)
    grace_ms: int = Field(default=0, ge=0)
    size: PositiveCount | None = Field(default=None, validate_default=True)
    step: PositiveCount | None = Field(default=None, validate_default=True)

    @field_validator("size_ms", "advance_ms", "time_difference_ms", "gap_ms")
    @classmethod
    def _taken_by_the_type(cls, value: int | None, info: ValidationInfo) -> int | None:
        kind = info.data.get("type")
        if kind is None:  # the type is wrong, and reported as such
            return value
        if kind == "count":
            return count_field(kind, str(info.field_name), value, None)
        takes, name = WINDOW_DURATIONS[kind], str(info.field_name)
        if name in takes and value is None:
            raise ValueError(f"{kind} windows need {name}")
        if name not in takes and value is not None:
            raise ValueError(f"{kind} windows take {' and '.join(takes)} (and grace_ms), not {name}")
        size = info.data.get("size_ms")
        if name == "advance_ms" and value is not None and size is not None and value > size:
            raise ValueError(f"advance_ms ({value}) must not exceed size_ms ({size})")
        return value

    @field_validator("grace_ms", "size", "step")
    @classmethod
    def _counted(cls, value: int | None, info: ValidationInfo) -> int | None:
        kind = info.data.get("type")
        return value if kind is None else count_field(kind, str(info.field_name), value, info.data.get("size"))

    def definition(self) -> WindowDefinition | Counted:
        """The window definition; the validators above made sure it has the durations its type takes."""
        if self.type == "count":
            return Counted.of(self.size, self.step)
        durations: dict[str, Any] = {name: getattr(self, name) for name in WINDOW_DURATIONS[self.type]}
        return WINDOW_CLASSES[self.type](**durations, grace_ms=self.grace_ms)


class AggregationParams(_Strict):
    type: str
    field: str | None = Field(default=None, validate_default=True)
    max_items: Annotated[int, Field(ge=1)] | None = Field(default=None, validate_default=True)

    @field_validator("type")
    @classmethod
    def _known(cls, kind: str) -> str:
        if kind in AGGREGATIONS:
            return kind
        if ":" not in kind:
            raise ValueError(
                f"unknown aggregation '{kind}': expected {', '.join(AGGREGATIONS)}, or a class as package.module:Class"
            )
        try:
            import_aggregator(kind)
        except Exception as error:  # a user module may fail in any way: report it at its YAML path
            raise ValueError(f"cannot import aggregator class '{kind}': {_describe(error)}") from None
        return kind

    @field_validator("field")
    @classmethod
    def _field_when_needed(cls, field: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("type")
        if kind in NEEDS_FIELD and field is None:
            raise ValueError(f"{kind} needs a field: the name of the field of the record's value to aggregate")
        if kind == "count" and field is not None:
            raise ValueError("count counts records: it takes no field")
        return field

    @field_validator("max_items")
    @classmethod
    def _max_items_for_lists(cls, max_items: int | None, info: ValidationInfo) -> int | None:
        kind = info.data.get("type")
        if kind == "list" and max_items is None:
            raise ValueError("list needs max_items: the most values it keeps (the latest ones)")
        if kind is not None and kind != "list" and max_items is not None:
            raise ValueError(f"only list takes max_items, not {kind}")
        return max_items

    @property
    def is_custom(self) -> bool:
        return self.type not in AGGREGATIONS

    def build(self) -> Aggregation:
        """A new aggregation (a custom aggregator is constructed, once per task)."""
        if self.type == "list" and self.max_items is not None:
            return CappedList(self.max_items)
        simple = SIMPLE.get(self.type)
        return simple() if simple is not None else Custom(import_aggregator(self.type)())


def _describe(error: Exception) -> str:
    return str(error) if isinstance(error, ImportError) else f"{type(error).__name__}: {error}"


class EarlyParams(_Strict):
    """Early results, emitting final results: after every N records of a window, and for the windows
    changed since their last early result when stream time crosses a multiple of `every_ms`."""

    every_records: Annotated[int, Field(gt=0)] | None = None
    every_ms: PositiveMs | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> EarlyParams:
        if self.every_records is None and self.every_ms is None:
            raise ValueError("early needs every_records, every_ms, or both")
        return self


class AggregateParams(_Strict):
    """See docs/windows.md for each field. When the app YAML is loaded, the validation context holds the
    processor's `outputs`, which `output` and `late_topic` must be among."""

    window: WindowParams
    aggregation: AggregationParams | None = None
    aggregations: dict[Annotated[str, Field(min_length=1)], AggregationParams] | None = Field(
        default=None, min_length=1
    )
    group_by: str | list[str] | None = None
    keyless: Keyless = "alone"
    emit: Literal["final", "updates"] = "final"
    early: EarlyParams | None = None
    output: str
    late_topic: str | None = None
    store: str | None = Field(default=None, pattern=STORE_NAME)

    @model_validator(mode="before")
    @classmethod
    def _one_of_aggregation_and_aggregations(cls, params: Any) -> Any:
        """Checked before the fields, so that a missing or doubled aggregation is one error, whatever else is wrong."""
        if isinstance(params, dict):
            given = [name for name in ("aggregation", "aggregations") if params.get(name) is not None]
            if not given:
                raise ValueError("aggregation (one) or aggregations (several, by name) is required")
            if len(given) == 2:
                raise ValueError("give aggregation (one) or aggregations (several, by name), not both")
        return params

    @field_validator("group_by", mode="before")
    @classmethod
    def _field_names(cls, group_by: Any) -> Any:
        """Checked here, so that a mistake is reported as one (pydantic would report it for each choice)."""
        names = [group_by] if isinstance(group_by, str) else group_by
        if group_by is not None and not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
            raise ValueError("expected the name of a field of the records' values, or a list of such names")
        return group_by

    @field_validator("aggregation")
    @classmethod
    def _session_merges(cls, aggregation: AggregationParams | None, info: ValidationInfo) -> AggregationParams | None:
        if aggregation is not None:
            _mergeable_in(info.data.get("window"), aggregation)
        return aggregation

    @field_validator("late_topic")
    @classmethod
    def _late_records_exist(cls, topic: str | None, info: ValidationInfo) -> str | None:
        window = info.data.get("window")
        if topic is not None and window is not None and window.type == "count":
            raise ValueError("count windows have no late records: a record always goes into its key's windows")
        return topic

    @field_validator("aggregations")
    @classmethod
    def _sessions_merge(
        cls, aggregations: dict[str, AggregationParams] | None, info: ValidationInfo
    ) -> dict[str, AggregationParams] | None:
        for name, aggregation in (aggregations or {}).items():
            try:
                _mergeable_in(info.data.get("window"), aggregation)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        return aggregations

    @field_validator("early")
    @classmethod
    def _early_final_results(cls, early: EarlyParams | None, info: ValidationInfo) -> EarlyParams | None:
        if early is None:
            return early
        if info.data.get("emit") == "updates":
            raise ValueError(
                "early results are for emit: final; emit: updates sends each window's result at each commit"
            )
        window = info.data.get("window")
        if window is not None and window.type == "count":
            raise ValueError("count windows are sent as their last record comes, with nothing left to send early")
        if early.every_records is not None and window is not None and window.type == "sliding":
            raise ValueError(
                "sliding windows are aggregated from their records when sent and count none per window: "
                "give every_ms, not every_records"
            )
        return early

    _among_outputs = field_validator("output", "late_topic")(
        classmethod(lambda cls, topic, info: among_outputs(topic, info))
    )

    def built_aggregation(self) -> Aggregation:
        """The one aggregation, or the several as one whose aggregate holds each of theirs."""
        if self.aggregation is not None:
            return self.aggregation.build()
        return SeveralAggregations({name: spec.build() for name, spec in (self.aggregations or {}).items()})

    def store_name(self, processor: str) -> str:
        """The window or session store: `store`, else the processor's name."""
        return self.store or processor


def _mergeable_in(window: WindowParams | None, aggregation: AggregationParams) -> None:
    """Session windows merge sessions, so a custom aggregator of theirs needs `merge`."""
    if window is None or window.type != "session" or not aggregation.is_custom:
        return
    if not callable(getattr(import_aggregator(aggregation.type), "merge", None)):
        raise ValueError(
            f"'{aggregation.type}' has no merge(first, second), which session windows need to merge sessions"
        )
