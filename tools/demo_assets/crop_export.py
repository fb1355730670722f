"""Export of the demo crop models (colour classifier, appearance embedder) to ONNX.

Both are 32x32 crop models read by :class:`vstream.cascade.SecondaryModel`:
one input ``images`` ``[batch, 3, h, w]``, one output, and the metadata keys
:mod:`vstream.inference.secondary_spec` reads (kind, size, crop and resize
mode, value range), so a pipeline needs no more than ``{name, path}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from torch import nn


def export(model: nn.Module, path: Path, imgsz: int, output: str, metadata: dict[str, str]) -> None:
    """Write ``model`` (dynamic batch, opset 17) with the crop pipeline's metadata plus
    ``metadata`` (kind, labels, description...)."""
    import onnx

    example = torch.zeros(1, 3, imgsz, imgsz)
    torch.onnx.export(
        model, example, str(path), input_names=["images"], output_names=[output],
        dynamic_axes={"images": {0: "batch"}, output: {0: "batch"}}, opset_version=17,
        dynamo=False,
    )  # fmt: skip
    proto = onnx.load(str(path))
    crop = {
        "imgsz": json.dumps([imgsz, imgsz]),
        "crop": "stretch",
        "crop_round": "subpixel",  # trained on crop_rgb's crops of the fractional boxes
        "resize": "linear",
        "input_range": "1",
    }
    for key, value in {**crop, **metadata}.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(path))


def check_export(model: nn.Module, path: Path, imgsz: int) -> float:
    """Largest difference between ONNX Runtime and torch on a batch of 5 random crops."""
    import onnxruntime as ort

    x = torch.rand(5, 3, imgsz, imgsz)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"images": x.numpy()})
    with torch.no_grad():
        return float(np.abs(got - model(x).numpy()).max())


def save(model: nn.Module, path: Path, imgsz: int, output: str, metadata: dict[str, str]) -> None:
    """:func:`export` ``model`` and say the file's size and how far ONNX Runtime is from torch."""
    export(model, path, imgsz, output, metadata)
    print(f"{path}: {path.stat().st_size} bytes; onnxruntime vs torch max "
          f"difference {check_export(model, path, imgsz):.1e}")  # fmt: skip


def tool_parser(description: str | None, asset: Path) -> argparse.ArgumentParser:
    """The options every crop-model tool takes: ``train`` or ``evaluate``, ``--out``
    (default ``asset``), ``--seed``, ``--threads``; each tool adds its own."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("train", "evaluate"))
    parser.add_argument("--out", type=Path, default=asset)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, with torch set to use ``--threads`` threads."""
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args
