"""``vstream info``: describe an ONNX detector."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from vstream import assets
from vstream.cli.args import EXIT_OK
from vstream.cli.options import add_flags, flag_issues, given
from vstream.config.detector_options import split_options
from vstream.config.loading import ConfigError
from vstream.config.model import ModelConfig
from vstream.postprocess.formats import FAMILIES

MODEL_FLAGS = {"--imgsz", "--resize", "--resize-mode", "--format", "--scores"}
"""The model flags of ``vstream run`` that change what ``info`` says: the input size, the
preprocessing, the family and its scores (a model that cannot be recognised needs one)."""

_FLAGS: dict[str, Any] = {}
"""The flags made from the config's model fields (:mod:`vstream.cli.options`), by flag."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    info = commands.add_parser("info", help="describe an ONNX detector")
    info.add_argument(
        "model",
        nargs="?",
        default=str(assets.DEMO_MODEL),
        help="ONNX model file, or vstream://NAME for a bundled one (default: vstream://demo.onnx, "
        "the demo detector)",
    )
    # Where Detector's own errors put them (model.format), so they are named as flags.
    sections = ((("model",), ModelConfig),)
    _FLAGS.update(add_flags(info.add_argument_group("model"), sections, only=MODEL_FLAGS))
    info.set_defaults(handler=info_command)


def _shape(dims: Sequence[object]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def info_command(args: argparse.Namespace) -> int:
    options = {str(path[-1]): value for path, value in given(args).items()}
    try:  # before torch loads: a missing model or a bad flag is said at once
        model, _, _ = split_options(args.model, options)
    except ConfigError as exc:
        raise flag_issues(exc, _FLAGS, "") from None
    from vstream.detector import Detector
    from vstream.inference.model import sized_input
    from vstream.inference.wheels import describe_runtime

    detector = Detector(model, device="cpu")
    spec = detector.model.spec
    height, width = detector.model.input_size
    family = FAMILIES[detector.output_format]
    pre = detector.preprocessing
    names = ", ".join(f"{k}={v}" for k, v in sorted(detector.class_names.items())) or "(none)"
    if detector.class_names:
        configured = detector.config.class_names is not None
        names += f" (from {'the config' if configured else spec.names_source})"
    lines = [
        f"model:    {spec.path}",
        f"runtime:  {describe_runtime()}",
        f"input:    {spec.input.name} {spec.input.type_name} {_shape(spec.input.shape)}",
        *(
            f"input:    {i.name} {i.type_name} {_shape(i.shape)} (bound once to {width}, {height})"
            for i in spec.size_inputs
        ),
        *(f"output:   {o.name} {o.type_name} {_shape(o.shape)}" for o in spec.outputs),
        f"task:     {detector.task.task.value}",
        *(f"  because {reason}" for reason in detector.task.reasons),
        f"format:   {detector.output_format.value} ({family.models})",
        *(f"  because {reason}" for reason in detector.recognition.reasons),
        f"boxes:    {family.box}{', normalised' if family.normalised else ', input pixels'}, "
        f"{'NMS by vstream' if family.nms else 'no NMS (top-k on the device)'}",
        f"preprocess: {pre.describe()}, {detector.config.resize} interpolation",
        *(f"  because {reason}" for reason in detector.preprocessing_reasons),
        f"imgsz:    {width}x{height} ({sized_input(spec, detector.config.imgsz)[1]})",
        f"classes:  {names}",
        *(
            [f"keypoints: {len(detector.keypoint_names)}: {', '.join(detector.keypoint_names)}"]
            if detector.keypoint_names
            else []
        ),
        *(f"metadata: {k}={v}" for k, v in sorted(spec.metadata.items()) if k != "names"),
    ]
    print("\n".join(lines))
    return EXIT_OK
