"""The ``vstream`` command line.

Exit status: 0 on success, 2 for bad input (a missing or corrupt video, a model
that does not fit, bad arguments) with one line on stderr, 1 for anything else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from vstream import assets
from vstream.errors import VstreamError
from vstream.evaluation import evaluate_files
from vstream.frame import PixelFormat
from vstream.inference import describe_runtime
from vstream.pipeline import Detector, run_detection
from vstream.postprocess import OutputFormat
from vstream.sinks import JsonLinesSink
from vstream.sources import VideoFileSource

EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT = 0, 1, 2

log = logging.getLogger("vstream")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"vstream: error: {message} (see {self.prog} --help)\n")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _class_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"class ids must be integers, got {text!r}") from None
    if any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"class ids must be non-negative, got {text!r}")
    return ids


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vstream", description="Object detection on video streams.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="detect objects in a video, one JSON record per frame",
        description="Detect objects in every frame of a video and write JSON Lines. "
        "With no arguments, runs the bundled demo model on the bundled sample video.",
    )
    run.add_argument(
        "--source",
        type=Path,
        default=assets.SAMPLE_VIDEO,
        help="video file (default: the bundled sample video)",
    )
    run.add_argument(
        "--model",
        type=Path,
        default=assets.DEMO_MODEL,
        help="ONNX detector (default: the bundled demo model)",
    )
    run.add_argument("--output", "-o", type=Path, help="JSON Lines file (default: stdout)")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    run.add_argument(
        "--imgsz", type=_positive, help="model input size (default: the model's own, else 640)"
    )
    run.add_argument("--conf", type=_fraction, default=0.25, help="minimum score (default 0.25)")
    run.add_argument("--iou", type=_fraction, default=0.45, help="NMS IoU threshold (default 0.45)")
    run.add_argument("--classes", type=_class_ids, help="class ids to keep, e.g. 0,2")
    run.add_argument(
        "--max-det", type=_positive, default=300, help="most detections per frame (default 300)"
    )
    run.add_argument("--batch", type=_positive, help="frames per inference (default: 1)")
    run.add_argument(
        "--format",
        choices=[f.value for f in OutputFormat],
        help="detector output format (default: detected from the output shape)",
    )
    run.add_argument(
        "--pixel-format",
        choices=[p.value for p in PixelFormat],
        default="rgb24",
        help="what the decoder hands to preprocessing (default: rgb24)",
    )
    run.add_argument("--quiet", "-q", action="store_true", help="no progress or summary")
    run.set_defaults(handler=_run)

    info = commands.add_parser("info", help="describe an ONNX detector")
    info.add_argument(
        "model",
        type=Path,
        nargs="?",
        default=assets.DEMO_MODEL,
        help="ONNX model (default: the bundled demo model)",
    )
    info.set_defaults(handler=_info)

    evaluate = commands.add_parser("eval", help="mAP of JSON Lines detections against ground truth")
    evaluate.add_argument("records", type=Path, help="JSON Lines written by vstream run")
    evaluate.add_argument(
        "ground_truth",
        type=Path,
        nargs="?",
        default=assets.SAMPLE_GROUND_TRUTH,
        help="ground-truth JSON (default: the sample video's)",
    )
    evaluate.add_argument("--iou", type=_fraction, default=0.5, help="match IoU (default 0.5)")
    evaluate.set_defaults(handler=_eval)
    return parser


class _ProgressLine:
    """A self-updating progress line on a terminal, at most a few times a second."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self._shown = 0.0

    def __call__(self, frames: int, elapsed: float) -> None:
        now = time.monotonic()
        if now - self._shown < 0.25:
            return
        self._shown = now
        fps = frames / elapsed if elapsed > 0 else 0.0
        done = (
            f"{frames}/{self.total} ({100 * frames / self.total:.0f}%)"
            if self.total
            else f"{frames}"
        )
        sys.stderr.write(f"\rvstream: {done} frames, {fps:.1f} fps ")
        sys.stderr.flush()

    def clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\033[K")


def _run(args: argparse.Namespace) -> int:
    detector = Detector(
        args.model,
        device=args.device,
        imgsz=args.imgsz,
        conf=args.conf,
        iou=args.iou,
        classes=args.classes,
        max_det=args.max_det,
        batch_size=args.batch,
        output_format=args.format,
    )
    source = VideoFileSource(args.source, device=detector.device, pixel_format=args.pixel_format)
    progress = _ProgressLine(source.frame_count) if sys.stderr.isatty() and not args.quiet else None
    with JsonLinesSink(args.output) as sink:
        try:
            summary = run_detection(source, detector, sink, progress)
        finally:
            if progress is not None:
                progress.clear()
    if not args.quiet:
        log.info("%s: %s on %s", args.source.name, summary, detector.device)
    return EXIT_OK


def _info(args: argparse.Namespace) -> int:
    detector = Detector(args.model, device="cpu")
    spec = detector.engine.spec

    def shape(dims: Sequence[object]) -> str:
        return "[" + ", ".join(str(d) for d in dims) + "]"

    lines = [
        f"model:    {spec.path}",
        f"runtime:  {describe_runtime()}",
        f"input:    {spec.input.name} {spec.input.type_name} {shape(spec.input.shape)}",
    ]
    lines += [f"output:   {o.name} {o.type_name} {shape(o.shape)}" for o in spec.outputs]
    lines.append(f"format:   {detector.output_format.value}")
    height, width = detector.engine.input_size
    lines.append(f"imgsz:    {width}x{height}")
    names = ", ".join(f"{k}={v}" for k, v in sorted(detector.class_names.items())) or "(none)"
    lines.append(f"classes:  {names}")
    lines += [f"metadata: {k}={v}" for k, v in sorted(spec.metadata.items()) if k != "names"]
    print("\n".join(lines))
    return EXIT_OK


def _eval(args: argparse.Namespace) -> int:
    for path in (args.records, args.ground_truth):
        if not path.is_file():
            raise VstreamError(f"file not found: {path}")
    try:
        accuracy = evaluate_files(args.records, args.ground_truth, args.iou)
    except (ValueError, KeyError, TypeError) as exc:
        raise VstreamError(f"cannot evaluate {args.records}: malformed input ({exc})") from exc
    print(accuracy)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vstream`` command; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="vstream: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except VstreamError as exc:
        log.error("error: %s", exc)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("VSTREAM_DEBUG"):
            raise
        log.error(
            "unexpected error: %s: %s (set VSTREAM_DEBUG=1 for a traceback)",
            type(exc).__name__,
            exc,
        )
        return EXIT_UNEXPECTED
