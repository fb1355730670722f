"""A detector's keyword options, each routed to the config section that defines it.

Without torch, so that a command can check them (``vstream info`` a missing model)
before it loads the detector.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from vstream.config.loading import ConfigError, ConfigIssue, issues_from
from vstream.config.model import ModelConfig, PostprocessOptions, RuntimeOptions

_OPTION_MODELS: tuple[type[BaseModel], ...] = (ModelConfig, PostprocessOptions, RuntimeOptions)


def split_options(
    model: str | Path | ModelConfig, options: Mapping[str, Any]
) -> tuple[ModelConfig, PostprocessOptions, RuntimeOptions]:
    """Keyword options routed to the config model that defines each, and validated there.

    ``Detector("m.onnx", conf=0.3, device="cpu")`` takes exactly the options a
    pipelines file takes under ``model:``, ``postprocess:`` and ``runtime:``,
    with the same defaults and bounds.
    """
    parts: list[dict[str, Any]] = [{}, {}, {}]
    if isinstance(model, ModelConfig):
        parts[0] = model.model_dump(exclude_unset=True)  # validated again with the options
    else:
        parts[0]["path"] = str(model)
    for name, value in options.items():
        index = next((i for i, m in enumerate(_OPTION_MODELS) if name in m.model_fields), None)
        if index is None or name == "path":
            known = sorted({f for m in _OPTION_MODELS for f in m.model_fields} - {"path"})
            raise TypeError(f"unknown detector option {name!r}; options are: {', '.join(known)}")
        parts[index][name] = value
    validated = []
    for section, model_type, data in zip(
        ("model", "postprocess", "runtime"), _OPTION_MODELS, parts, strict=True
    ):
        try:
            validated.append(model_type.model_validate(data))
        except ValidationError as exc:
            issues = issues_from(exc, data, {}, model_type)
            raise ConfigError(
                [ConfigIssue(f"{section}.{i.path}", None, i.message) for i in issues]
            ) from None
    model_config, post, runtime = validated
    return (
        cast(ModelConfig, model_config),
        cast(PostprocessOptions, post),
        cast(RuntimeOptions, runtime),
    )
