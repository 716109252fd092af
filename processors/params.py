"""The checks a built-in processor's `Params` make against the processor's own YAML: that a topic its params
name is one of the processor's inputs or outputs. When the app YAML is loaded, the validation context holds
them (runtime/config/processor_params.py); a model validated without it (in `init`) skips these checks."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo


def processor_context(info: ValidationInfo) -> dict[str, Any]:
    """The processor's name, inputs, broadcast inputs, outputs and tables; empty outside the app YAML."""
    return info.context if isinstance(info.context, dict) else {}


def among_inputs(topic: str, info: ValidationInfo) -> str:
    inputs = processor_context(info).get("inputs")
    if inputs is not None and topic not in inputs:
        raise ValueError(f"topic '{topic}' is not among the processor's inputs {sorted(inputs)}")
    return topic


def among_outputs(topic: str | None, info: ValidationInfo) -> str | None:
    outputs = processor_context(info).get("outputs")
    if topic is not None and outputs is not None and topic not in outputs:
        raise ValueError(f"topic '{topic}' is not among the processor's outputs {sorted(outputs)}")
    return topic
