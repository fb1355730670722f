"""The vocabulary every option is written in: strict, bounded, documented once.

Every option vstream has is a field of a pydantic model in this package, with
its default, its bounds and its description; the CLI flags, the YAML keys, the
HTTP API and the Python keyword arguments are all read through these models,
so none of them can disagree about a default or accept a value the others
refuse. Types are strict (``true`` is not 1, ``"yes"`` is not true), numbers
are finite and bounded above and below, and unknown keys are errors.

Nothing here imports torch, ONNX Runtime or PyAV: ``vstream validate`` and
``vstream schema`` read configs without loading the model stack.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
)

from vstream.assets import bundled, is_bundled

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""Stream, pipeline, sink, line and zone names: safe in metric labels, topics and URLs."""

Name = Annotated[str, Field(pattern=NAME_PATTERN)]

MAX_SECONDS = 10_000_000.0
"""Upper bound of any time in seconds (about 116 days): finite, and far from overflow."""


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds a C0 control character or DEL (a line break, a tab, an escape)."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def listed_twice(items: Iterable[Any], what: str) -> None:
    """Refuse items listed more than once, naming the first few; linear in the items (a
    classifier may have 100 000 labels)."""
    repeated = sorted(item for item, count in Counter(items).items() if count > 1)
    if repeated:
        more = f" and {len(repeated) - 10} more" if len(repeated) > 10 else ""
        raise ValueError(f"{what} listed twice: {repeated[:10]}{more}")


class StrictModel(BaseModel):
    """Unknown keys are errors, numbers finite: a misspelt option is never silently ignored."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


@dataclass(frozen=True)
class Cli:
    """Marks a field as settable from the command line as ``flag`` (:mod:`vstream.cli.options`)."""

    flag: str
    metavar: str | None = None


def cli_marker(item: Any, depth: int = 0) -> Cli | None:
    """The :class:`Cli` marker of a field (or of a type inside its annotations), if it has one."""
    if isinstance(item, Cli):
        return item
    if depth > 4:
        return None
    for child in (*getattr(item, "metadata", ()), *getattr(item, "__metadata__", ())):
        found = cli_marker(child, depth + 1)
        if found is not None:
            return found
    return None


def flag(model: type[BaseModel], name: str) -> str:
    """The flag of ``model``'s field ``name`` (``--batch`` for ``batch_size``), from its marker."""
    marker = cli_marker(model.model_fields[name])
    if marker is None:
        raise KeyError(f"{model.__name__}.{name} has no flag")
    return marker.flag


def _bound_text(value: float) -> str:
    """A bound as people write it: 10000000, not 1e+07; 0.5 as 0.5."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _range_text(lo: float, hi: float, open_low: bool) -> str:
    low, high = _bound_text(lo), _bound_text(hi)
    return f"({low}, {high}]" if open_low else f"[{low}, {high}]"


def _not_a_number(value: Any, what: str, allowed: str) -> ValueError:
    """The message for a value of the wrong type: what it is, and the range that was wanted.

    YAML 1.1 reads ``1e308`` (no dot) as text: said so, since it looks like a number.
    """
    hint = ""
    found = re.fullmatch(r"([-+]?\d+)[eE]([-+]?)(\d+)", value) if isinstance(value, str) else None
    if found is not None:
        mantissa, sign, exponent = found.groups()
        number = "digits" if what == "an integer" else f"{mantissa}.0e{sign or '+'}{exponent}"
        hint = f", which YAML reads as text (write {number})"
    return ValueError(f"must be {what}, got {value!r}{hint} (allowed: {allowed})")


def Int(lo: int, hi: int) -> Any:
    """An integer in ``[lo, hi]``; booleans, floats and strings are refused."""

    allowed = _range_text(lo, hi, False)

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _not_a_number(value, "an integer", allowed)
        if not lo <= value <= hi:
            raise ValueError(f"must be in {allowed}, got {value!r}")
        return value

    # The bounds come before the validator so that the JSON schema shows them as
    # minimum/maximum; the validator still runs first, with a message naming the range.
    return Annotated[int, Strict(), Field(ge=lo, le=hi), BeforeValidator(check)]


def Number(lo: float, hi: float, *, open_low: bool = False) -> Any:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``); integers are fine."""

    allowed = _range_text(lo, hi, open_low)

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _not_a_number(value, "a number", allowed)
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r} (allowed: {allowed})")
        if value > hi or value < lo or (open_low and value == lo):
            raise ValueError(f"must be in {allowed}, got {value!r}")
        return value

    bound = Field(gt=lo, le=hi) if open_low else Field(ge=lo, le=hi)
    return Annotated[float, bound, BeforeValidator(check)]


def Seconds(lo: float = 0.0, hi: float = MAX_SECONDS, *, open_low: bool = True) -> Any:
    """A duration in seconds, ``(lo, hi]`` by default."""
    return Number(lo, hi, open_low=open_low)


Flag = Annotated[bool, Strict()]
"""A boolean: ``true`` or ``false``, never ``1`` or ``"yes"``."""


def empty_as_none(value: Any) -> Any:
    """``""`` means unset, so ``${VAR:-}`` can leave an optional setting out."""
    return None if value == "" else value


EmptyIsNone = BeforeValidator(empty_as_none)


RELATIVE_TO_CONFIG = "relative to the config file"
"""How descriptions say where a relative path starts; flags, given without a config file, say
the working folder instead (:mod:`vstream.cli.options`)."""


def base_dir(info: ValidationInfo) -> Path:
    """The directory relative paths are resolved against: the config file's, else the cwd."""
    context = info.context or {}
    return Path(context.get("base_dir") or Path.cwd())


def resolve_path(value: str, info: ValidationInfo) -> Path:
    """``value`` as an absolute, normalised path (relative to :func:`base_dir`).

    A ``vstream://`` address names a bundled file to read (:func:`input_path`); as a
    place to write or a folder it is refused, rather than read as a relative path.
    ``~name`` of no user is a ValueError naming the value: Python raises RuntimeError,
    which pydantic does not report but lets through (a 500, an "unexpected error"). A URL
    is refused, unquoted.
    """
    if is_bundled(value):
        raise ValueError(f"{value}: vstream:// names a bundled file to read, not a place to write")
    if "://" in value:
        # Unquoted: made a path, https://user:pw@host becomes https:/user:pw@host (a folder
        # "https:" is made for an output), which the redaction of URLs does not find.
        raise ValueError("expected a file path, got a URL")
    try:
        path = Path(value).expanduser()
    except RuntimeError:
        home = value.split("/", 1)[0]
        raise ValueError(f"{value}: no home directory for {home} (no such user)") from None
    return (path if path.is_absolute() else base_dir(info) / path).resolve()


def input_path(value: str, info: ValidationInfo) -> Path:
    """A file to read: a bundled one (``vstream://demo.onnx``), else :func:`resolve_path`."""
    return bundled(value) if is_bundled(value) else resolve_path(value, info)


def existing_file(value: str, info: ValidationInfo, what: str) -> str:
    path = input_path(value, info)
    if not path.is_file():
        raise ValueError(f"{what} not found: {path}")
    return str(path)
