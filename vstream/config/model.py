"""Model, postprocessing and runtime options: what a pipeline's detector is and how it runs."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vstream.config.base import (
    RELATIVE_TO_CONFIG,
    Cli,
    EmptyIsNone,
    Flag,
    Int,
    Number,
    Seconds,
    StrictModel,
    existing_file,
    has_control_character,
    listed_twice,
    resolve_path,
)
from vstream.errors import ModelError


class OutputFormat(str, enum.Enum):
    """Layout of a detector's raw outputs (the ``--format`` values).

    Defined with the options that name it; :mod:`vstream.postprocess.formats`
    decodes each one and re-exports it.
    """

    YOLOV8 = "yolov8"
    """``[B, 4 + nc, N]``: cx, cy, w, h then one score per class (Ultralytics YOLOv8/YOLO11)."""
    YOLOV5 = "yolov5"
    """``[B, N, 5 + nc]``: cx, cy, w, h, objectness, then class scores."""
    YOLOX = "yolox"
    """``[B, G, 5 + nc]`` like YOLOv5, but raw grid offsets (YOLOX's default export)."""
    END_TO_END = "end2end"
    """``[B, K, 6]``: x1, y1, x2, y2, score, class, NMS already done (YOLOv10, YOLO26)."""
    RTDETR = "rtdetr"
    """``[B, Q, 4 + nc]``: normalised cx, cy, w, h, sigmoid scores (Ultralytics RT-DETR to 8.3)."""
    RTDETR_TOPK = "rtdetr_topk"
    """``[B, K, 6]``: normalised cx, cy, w, h, score, class (Ultralytics RT-DETR from 8.4)."""
    DETR = "detr"
    """boxes ``[B, Q, 4]`` normalised cx, cy, w, h + logits ``[B, Q, nc]`` (RF-DETR, D-FINE)."""
    DETR_SIZED = "detr_sized"
    """labels ``[B, K]``, boxes ``[B, K, 4]`` xyxy, scores ``[B, K]``, given ``orig_target_sizes``
    (RT-DETR's original export, D-FINE and DEIM with their postprocessor)."""
    YOLO_NAS = "yolo_nas"
    """boxes ``[B, G, 4]`` xyxy input pixels + scores ``[B, G, nc]`` (YOLO-NAS, without NMS)."""


DetrScores = Literal["sigmoid", "softmax"]
"""How a ``detr`` model's logits become scores: a sigmoid per class (RT-DETR, D-FINE,
RF-DETR), or a softmax whose last class is "no object" (DETR)."""

ResizeMode = Literal["letterbox", "stretch"]
"""How a frame becomes the model input: scaled whole with padding, or stretched to fill it."""


MAX_BATCH = 64
MAX_IMGSZ = 4096
MAX_THREADS = 64
MAX_RUNS = 16
MAX_LABELS = 100_000
"""Most class names or labels of one model, in a config or in its metadata."""
MAX_LABEL_LENGTH = 100
MAX_IO_MIB = 256 * 1024
DEFAULT_IO_MIB = 2048
"""A model's inputs and outputs at its planned batch, by default: a YOLOv8 at 1280 with a
batch of 64 takes about 1.9 GiB."""
IO_BUDGET_HELP = (
    "most MiB this model's inputs and outputs may take at the planned batch (one buffer; each "
    "of the in_flight buffers of a detector takes as much): a model file declaring larger "
    "tensors is refused, before anything is allocated"
)

Mean = Number(-1000, 1000)
"""A channel's mean, in input_range units; a model file's is held to it too."""
Std = Number(0, 1000, open_low=True)
"""A channel's divisor, in input_range units; a model file's is held to it too."""
_CHANNEL_RULES = {"mean": TypeAdapter(Mean), "std": TypeAdapter(Std)}


def model_channels(
    shown: str, key: Literal["mean", "std"], value: Any
) -> tuple[float, float, float]:
    """The per-channel ``key`` a model's own files give (``value``, parsed from its metadata
    or a ``preprocessor_config.json``), held to the config's rule for it: ModelError, one
    line beginning with ``shown`` (where and what), for anything else. Read as the
    family's default instead, a typo in a model's metadata normalised every frame wrong
    without a word."""
    if not (isinstance(value, list | tuple) and len(value) == 3):
        raise ModelError(f"{shown} is not three numbers")
    rule = _CHANNEL_RULES[key]
    try:
        red, green, blue = (float(rule.validate_python(v)) for v in value)
    except ValidationError as exc:
        reason = exc.errors()[0]["ctx"]["error"]
        raise ModelError(f"{shown}: each value {reason}") from None
    return red, green, blue


MAX_CLASS_ID = 100_000


def _some_distinct(classes: list[int]) -> list[int]:
    """Class ids to keep or read, each once. An empty list would keep none without a word:
    it is an empty variable (``--classes "$IDS"``), not a wish."""
    if not classes:
        raise ValueError(
            "an empty list keeps no class: list at least one class id, or leave it out to "
            "keep every class"
        )
    listed_twice(classes, "class ids")
    return classes


ClassIds = Annotated[
    list[Int(0, MAX_CLASS_ID)],  # type: ignore[misc]  # a call: a type to pydantic, not to mypy
    Field(max_length=1000),
    AfterValidator(_some_distinct),
]
"""Detector class ids: of the postprocess, a line, a zone, a secondary model's ``on``."""


def _image_size(value: Any) -> Any:
    """``640`` or ``[height, width]``, checked whole: one line with the value and the rule.

    Left to the union below, a bad value would get one message per branch, each
    naming pydantic's validators.
    """
    if value is None:
        return value
    pair = isinstance(value, list | tuple) and len(value) == 2
    sizes = value if pair else (value,)
    if all(
        isinstance(size, int) and not isinstance(size, bool) and 32 <= size <= MAX_IMGSZ
        for size in sizes
    ):
        return tuple(value) if pair else value
    raise ValueError(
        f"must be an integer in [32, {MAX_IMGSZ}] or [height, width] of two such integers, "
        f"got {list(value) if isinstance(value, tuple) else value!r}"
    )


ImageSize = Annotated[
    # Calls make pydantic's constrained types, which mypy cannot read as types.
    Int(32, MAX_IMGSZ) | tuple[Int(32, MAX_IMGSZ), Int(32, MAX_IMGSZ)] | None,  # type: ignore[misc]
    BeforeValidator(_image_size),
]


def _class_names(value: Any) -> Any:
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    raise ValueError(f"must be a list of names or a mapping of class id to name, got {value!r}")


def _printable(label: str) -> str:
    """A label is shown in logs and summaries: a line break in it would forge a line there."""
    if has_control_character(label):
        raise ValueError(f"must not contain control characters, got {label!r}")
    return label


ClassName = Annotated[
    str, Field(min_length=1, max_length=MAX_LABEL_LENGTH), AfterValidator(_printable)
]


def describe_classes(class_names: Mapping[int, str] | Sequence[str]) -> str:
    """The first 20 of a model's classes as ``0 person, 1 bicycle`` (and how many more): what
    a message refusing a class id it lacks shows."""
    items = (
        sorted(class_names.items())
        if isinstance(class_names, Mapping)
        else list(enumerate(class_names))
    )
    shown = ", ".join(f"{i} {name}" for i, name in items[:20])
    return shown + (f" and {len(items) - 20} more" if len(items) > 20 else "")


def absent_classes(
    wanted: Iterable[int], class_names: Mapping[int, str] | Sequence[str]
) -> list[int]:
    """The ids of ``wanted`` a model whose classes are ``class_names`` lacks: a filter naming
    them keeps or counts nothing of them, silently. A model that names none is not checked."""
    if not class_names:
        return []
    known = set(class_names) if isinstance(class_names, Mapping) else set(range(len(class_names)))
    return [c for c in wanted if c not in known]


class ProviderConfig(StrictModel):
    """An ONNX Runtime execution provider and its options (strings, as ORT takes them)."""

    name: Literal["tensorrt", "cuda", "cpu"]
    options: dict[
        Annotated[str, Field(max_length=100)],
        Annotated[str, Field(max_length=1000)] | Int(-(2**31), 2**31 - 1) | Flag,
    ] = Field(default_factory=dict, max_length=50)


Provider = Literal["auto", "cuda", "tensorrt"]
"""``runtime.provider``: which ONNX Runtime execution provider runs a CUDA pipeline's model."""

PROVIDER_CHAINS: dict[str, tuple[str, ...]] = {
    "tensorrt": ("tensorrt", "cuda", "cpu"),
    "cuda": ("cuda", "cpu"),
}
"""What ``runtime.provider`` asks ONNX Runtime for, in order: the nodes TensorRT cannot take
run on CUDA, and those CUDA cannot take on the CPU."""


def provider_chain(
    providers: list[ProviderConfig] | None, provider: Provider
) -> list[ProviderConfig] | None:
    """The execution providers to ask for: ``model.providers`` as listed, or ``provider``'s chain.

    ``model.providers`` is the long form (options per provider); ``runtime.provider``
    the switch. Both may be given when they agree on the first provider; when
    they disagree, which one was meant cannot be known, so it is an error
    (``ValueError``, one line). None: the default (CUDA, then the CPU).
    """
    if provider == "auto":
        return providers
    if providers:
        if providers[0].name != provider:
            raise ValueError(
                f"runtime.provider is {provider} but model.providers starts with "
                f"{providers[0].name}: list {provider} first there, or leave one of them out"
            )
        return providers
    return [ProviderConfig(name=name) for name in PROVIDER_CHAINS[provider]]


def tensorrt_cache(configured: str | None) -> Path:
    """The folder of TensorRT's engines and timing cache: ``runtime.tensorrt_cache``, else the
    user's cache folder (``$XDG_CACHE_HOME/vstream/tensorrt``, ``~/.cache/vstream/tensorrt``)."""
    if configured is not None:
        return Path(configured)
    root = os.environ.get("XDG_CACHE_HOME") or Path("~/.cache").expanduser()
    return Path(root) / "vstream" / "tensorrt"


class ModelConfig(StrictModel):
    """The ONNX detector shared by a pipeline's sources."""

    path: Annotated[str, Cli("--model")] = Field(
        max_length=4096,
        description=f"ONNX file, {RELATIVE_TO_CONFIG}, or vstream://NAME for a bundled one",
    )
    imgsz: Annotated[ImageSize, Cli("--imgsz")] = Field(
        None,
        description="input size for dynamic models: 640 or [h, w]; default: the model's "
        "(its imgsz metadata, else a preprocessor_config.json beside it), else 640",
    )
    resize: Annotated[Literal["linear", "area"], Cli("--resize")] = Field(
        "linear",
        description="how frames shrink into the model input: linear is the reference letterbox "
        "(OpenCV's bilinear on FFmpeg's RGB, what Ultralytics validates models on); area "
        "averages every pixel, cheaper on a CPU, but changes the detections",
    )
    resize_mode: Annotated[ResizeMode | None, Cli("--resize-mode")] = Field(
        None,
        description="where frames go in the model input: letterbox keeps their proportions "
        "with grey bars (YOLO families), stretch fills the input (RT-DETR, RF-DETR, D-FINE, "
        "DEIM were trained so); default: a preprocessor_config.json beside the model, else "
        "the model family's. Independent of resize, which "
        "is the interpolation",
    )
    input_range: Literal[1, 255] | None = Field(
        None,
        description="model input values 0..1 or 0..255; default: a preprocessor_config.json "
        "beside the model, else the family's",
    )
    mean: tuple[Mean, Mean, Mean] | None = Field(
        None,
        description="per-channel (R, G, B) mean subtracted, in input_range units; default: "
        "the model metadata's mean, else a preprocessor_config.json beside the model, else "
        "the family's",
    )
    std: tuple[Std, Std, Std] | None = Field(
        None,
        description="per-channel (R, G, B) divisor after the mean, in input_range units; "
        "default: the model metadata's std, else a preprocessor_config.json beside the "
        "model, else the family's",
    )
    dtype: Literal["auto", "float32", "float16"] = Field(
        "auto", description="expected input type; the model's own is used, a mismatch is an error"
    )
    format: Annotated[OutputFormat | None, Cli("--format")] = Field(
        None,
        description="detector family (output layout); default: recognised from the output "
        "names and shapes, the input size and the metadata (vstream info says why)",
    )
    scores: Annotated[DetrScores | None, Cli("--scores")] = Field(
        None,
        description="detr format: how the logits become scores: sigmoid per class, the best "
        "max_det of queries x classes (RT-DETR, D-FINE, RF-DETR), or softmax with a last "
        "no-object class, dropped, one class per query (DETR); default: softmax where the "
        "output 'logits' has one column more than the class names",
    )
    class_names: Annotated[
        list[ClassName] | dict[Annotated[str, Field(pattern=r"^\d{1,6}$")], ClassName] | None,
        BeforeValidator(_class_names),
        Field(max_length=MAX_LABELS),
    ] = Field(None, description="default: the model's metadata")
    keypoint_names: Annotated[list[ClassName], Field(min_length=1, max_length=1000)] | None = Field(
        None,
        description="a pose model's keypoint names, in its order; default: kpt_names in "
        "its metadata, else COCO's 17 (nose ... right_ankle) for 17 keypoints, else 0, 1...",
    )
    skeleton: Annotated[list[tuple[Int(0, 999), Int(0, 999)]], Field(max_length=1000)] | None = (
        Field(
            None,
            description="pairs of keypoint indices drawn as limbs on pictures; default: COCO's "
            "person skeleton for 17 keypoints, else none",
        )
    )
    providers: list[ProviderConfig] | None = Field(
        None, max_length=3, description="ONNX Runtime execution providers in order of preference"
    )
    max_io_mib: Int(1, MAX_IO_MIB) = Field(DEFAULT_IO_MIB, description=IO_BUDGET_HELP)
    intra_op_threads: Annotated[Int(0, MAX_THREADS), Cli("--threads")] = Field(
        0,
        description="ONNX Runtime threads per model run; 0: chosen with the concurrent runs "
        "(on a CPU: the cores divided among the runs)",
    )
    spin_wait: Annotated[Flag, Cli("--spin-wait")] = Field(
        False,
        description="let ONNX Runtime's threads spin between operators: faster when the model "
        "has the CPU to itself, slower when decoding shares its cores",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        return existing_file(value, info, "model file")

    def names(self) -> dict[int, str] | list[str] | None:
        """Class names as the detector takes them."""
        names = self.class_names
        return {int(k): v for k, v in names.items()} if isinstance(names, dict) else names


class PostprocessOptions(StrictModel):
    """Which boxes are kept."""

    conf: Annotated[Number(0, 1), Cli("--conf")] = Field(0.25, description="minimum score")
    iou: Annotated[Number(0, 1), Cli("--iou")] = Field(
        0.45, description="NMS suppresses a box overlapping a better one of its class by more"
    )
    classes: Annotated[ClassIds | None, Cli("--classes", "IDS")] = Field(
        None, description="class ids to keep, e.g. 0,2; default: all"
    )
    max_det: Annotated[Int(1, 10_000), Cli("--max-det")] = Field(
        300, description="most detections per frame"
    )
    max_candidates: Int(1, 1_000_000) = Field(
        30_000, description="most boxes per frame handed to NMS, highest scores first"
    )
    mask_format: Annotated[Literal["rle", "polygon"], Cli("--mask-format")] = Field(
        "rle",
        description="how records carry a segmentation model's masks: COCO RLE "
        '("mask": {"size", "counts"}) or polygons ("polygon": [[x, y, x, y, ...], ...])',
    )


class RuntimeOptions(StrictModel):
    """Where and how a pipeline runs: device, batching, buffers, threads."""

    @field_validator("device", mode="before")
    @classmethod
    def _torch_device(cls, value: object) -> object:
        """A ``torch.device`` as Python users hold it, by name (``cuda:0``); torch not loaded."""
        if type(value).__module__ == "torch" and type(value).__name__ == "device":
            return str(value)
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda|cuda:\d{1,2}", value):
            raise ValueError(f"unknown device {value!r}; use auto, cpu, cuda or cuda:N")
        return value

    device: Annotated[str, Cli("--device")] = Field(
        "auto",
        max_length=16,
        description="auto, cpu, cuda or cuda:N; auto takes CUDA where torch and ONNX Runtime "
        "both can",
    )
    provider: Annotated[Provider, Cli("--provider")] = Field(
        "auto",
        description="ONNX Runtime's execution provider on CUDA: tensorrt runs the model in "
        "TensorRT (fp16, engine and timing caches, shape profiles of the batch buckets; "
        "pip install 'vstream[tensorrt]'; the first run of a model builds its engine, minutes), "
        "then CUDA, then the CPU for what TensorRT cannot take; cuda is CUDA then the CPU; auto "
        "is model.providers as listed, else cuda. No effect on a CPU",
    )
    tensorrt_cache: Annotated[str | None, EmptyIsNone, Cli("--tensorrt-cache", "DIR")] = Field(
        None,
        max_length=4096,
        description="folder of TensorRT's engines (a folder per model content and engine "
        f"options) and timing cache, {RELATIVE_TO_CONFIG}; made when needed; default: "
        "$XDG_CACHE_HOME/vstream/tensorrt, else ~/.cache/vstream/tensorrt",
    )
    letterbox_kernel: Annotated[bool, Cli("--letterbox-kernel")] = Field(
        False,
        description="on CUDA, letterbox a batch of NVDEC's frames with one CUDA kernel "
        "(compiled by NVRTC when the pipeline starts; cuda-bindings, which torch's CUDA wheels "
        "bring) instead of about a hundred torch operations: the same pixels, far fewer "
        "dispatches for the host. No effect on a CPU",
    )
    batch_size: Annotated[Int(1, MAX_BATCH) | None, Cli("--batch")] = Field(
        None,
        description="most frames per model run (smaller batches run in smaller buckets); "
        "default: the batch the model fixes, else 32 on CUDA and 1 on a CPU",
    )
    batch_timeout_seconds: Annotated[Seconds(0, 10, open_low=False), Cli("--batch-timeout")] = (
        Field(0.04, description="how long a partly filled batch waits for more frames")
    )
    concurrent_runs: Annotated[Int(1, MAX_RUNS) | None, Cli("--concurrent-runs")] = Field(
        None,
        description="model runs in flight at once, each on a batch and buffers of its own; "
        "default: on a CPU one per core (up to 8), each with one ONNX Runtime thread; on CUDA 1",
    )
    in_flight: Annotated[Int(1, MAX_RUNS + 2) | None, Cli("--in-flight")] = Field(
        None,
        description="batches in flight at once, each in buffers of its own; default: "
        "concurrent runs + 2 (one being gathered, one per run, one in postprocessing)",
    )
    torch_threads: Annotated[Int(1, MAX_THREADS), Cli("--torch-threads")] = Field(
        1,
        description="torch's intra-op threads for preprocessing and postprocessing; "
        "process-wide (torch has one setting, made when the engine starts), so every pipeline "
        "of a file must give the same",
    )
    stall_seconds: Seconds(1, 3600, open_low=False) = Field(
        30.0,
        description="a stage at work on one batch for longer is reported stuck: /ready "
        "answers 503 naming it (every stream of the pipeline waits behind it)",
    )

    @field_validator("tensorrt_cache")
    @classmethod
    def _tensorrt_cache(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else str(resolve_path(value, info))

    @model_validator(mode="after")
    def _provider_on_cuda(self) -> RuntimeOptions:
        if self.provider != "auto" and self.device == "cpu":
            raise ValueError(
                f"provider {self.provider} runs on CUDA, but device is cpu: "
                "leave provider out, or set device to auto or cuda"
            )
        return self

    @model_validator(mode="after")
    def _kernel_on_cuda(self) -> RuntimeOptions:
        if self.letterbox_kernel and self.device == "cpu":
            raise ValueError(
                "letterbox_kernel is a CUDA kernel, but device is cpu: leave letterbox_kernel "
                "out, or set device to auto or cuda"
            )
        return self

    @model_validator(mode="after")
    def _room_for_the_runs(self) -> RuntimeOptions:
        runs, buffers = self.concurrent_runs, self.in_flight
        if runs is not None and buffers is not None and buffers < runs + 2:
            raise ValueError(
                f"in_flight ({buffers}) must be at least concurrent_runs + 2 ({runs + 2}): one "
                "batch being gathered, one per run, one in postprocessing; leave in_flight out "
                "to have it derived"
            )
        return self
