"""A processor's `params`, checked against the pydantic model its class declares (`Processor.Params`), and
the stores its class says those params need (`Processor.stores_for`), added to its `stores:`.

Both run as validators of `ProcessorConfig` fields, so an error nests under the field's path in the
YAML (`processors[0].params.window.size_ms: ...`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationInfo

from processors.processor import Processor
from stores.serdes import import_object


def _processor_class(info: ValidationInfo) -> type[Processor] | None:
    path = info.data.get("class_path")  # absent when the class is wrong: that error is reported
    return None if path is None else import_object(path)


def _context(info: ValidationInfo) -> dict[str, Any]:
    """What a `Params` model may check its fields against."""
    return {
        "name": info.data.get("name"),
        "inputs": info.data.get("inputs", []),
        "broadcast": info.data.get("broadcast", []),
        "outputs": info.data.get("outputs", []),
        "tables": list(info.data.get("tables", {})),
    }


def checked_params(params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """The params as the YAML gives them, once they are valid for the class's `Params`."""
    processor = _processor_class(info)
    if processor is not None and processor.Params is not None:
        processor.Params.model_validate(params, context=_context(info))
    return params


def with_stores_params_need(stores: Any, info: ValidationInfo) -> Any:
    """The YAML's `stores:` (not validated yet), with the stores the class says its params need."""
    processor, params, name = _processor_class(info), info.data.get("params"), info.data.get("name")
    if processor is None or processor.Params is None or params is None or name is None or not isinstance(stores, dict):
        return stores  # an error elsewhere is reported instead
    needed = processor.stores_for(processor.Params.model_validate(params, context=_context(info)), name)
    merged = dict(stores)
    for store, spec in needed.items():
        declared = stores.get(store, {})
        if isinstance(declared, dict):
            _check_declared(store, spec, declared)
            merged[store] = {**spec, **declared}
    return merged


def _check_declared(store: str, needed: Mapping[str, Any], declared: Mapping[str, Any]) -> None:
    """The YAML may add settings to a store the params need, not change what they need it to be."""
    if "kind" in declared and declared["kind"] != needed.get("kind", "key_value"):
        raise ValueError(
            f"store '{store}': the params need a {needed.get('kind', 'key_value')} store, not {declared['kind']}"
        )
    needed_ms, declared_ms = needed.get("retention_ms"), declared.get("retention_ms")
    if isinstance(needed_ms, int) and isinstance(declared_ms, int) and declared_ms < needed_ms:
        raise ValueError(f"store '{store}': retention_ms {declared_ms} is below the {needed_ms} the params need")
