"""``vstream run``: detect objects in a video, one JSON record per frame."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from vstream import assets
from vstream.cli.args import EXIT_OK, class_ids, fraction, positive
from vstream.frame import PixelFormat
from vstream.pipeline import Detector, run_detection
from vstream.postprocess import OutputFormat
from vstream.sinks import JsonLinesSink
from vstream.sources import VideoFileSource

log = logging.getLogger("vstream")


def add_parser(commands: argparse._SubParsersAction) -> None:
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
        "--imgsz", type=positive, help="model input size (default: the model's own, else 640)"
    )
    run.add_argument("--conf", type=fraction, default=0.25, help="minimum score (default 0.25)")
    run.add_argument("--iou", type=fraction, default=0.45, help="NMS IoU threshold (default 0.45)")
    run.add_argument("--classes", type=class_ids, help="class ids to keep, e.g. 0,2")
    run.add_argument(
        "--max-det", type=positive, default=300, help="most detections per frame (default 300)"
    )
    run.add_argument("--batch", type=positive, help="frames per inference (default: 1)")
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
    run.set_defaults(handler=run_command)


class ProgressLine:
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


def run_command(args: argparse.Namespace) -> int:
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
    progress = ProgressLine(source.frame_count) if sys.stderr.isatty() and not args.quiet else None
    with JsonLinesSink(args.output) as sink:
        try:
            summary = run_detection(source, detector, sink, progress)
        finally:
            if progress is not None:
                progress.clear()
    if not args.quiet:
        log.info("%s: %s on %s", args.source.name, summary, detector.device)
    return EXIT_OK
