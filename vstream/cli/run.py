"""``vstream run``: detect objects in a video, one JSON record per frame."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from vstream import assets
from vstream.cli.args import EXIT_OK, add_thread_options, class_ids, fraction, positive
from vstream.cli.serve import run_config_command
from vstream.frame import PixelFormat
from vstream.pipeline import Detector, run_detection
from vstream.pipeline.run import Progress
from vstream.postprocess import OutputFormat
from vstream.sinks import JsonLinesSink
from vstream.sources import (
    DecoderKind,
    FreshnessPolicy,
    ReconnectPolicy,
    Source,
    SourceOptions,
    open_source,
)
from vstream.uri import is_live, redact_uri

log = logging.getLogger("vstream")


def add_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="detect objects in a video, one JSON record per frame",
        description="Detect objects in every frame of a video and write JSON Lines. "
        "With no arguments, runs the bundled demo model on the bundled sample video. "
        "With a pipelines file (YAML), runs every pipeline in it until its file sources are done.",
    )
    run.add_argument(
        "config",
        type=Path,
        nargs="?",
        help="pipelines file (see vstream validate); the other options then come from it",
    )
    run.add_argument(
        "--source",
        default=str(assets.SAMPLE_VIDEO),
        help="video file, rtsp:// or http(s):// URL, or /dev/videoN "
        "(default: the bundled sample video)",
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
        help="what the decoder hands to preprocessing (default: rgb24 on cpu, nv12 on nvdec)",
    )
    add_source_options(run)
    add_thread_options(run)
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


def add_source_options(run: argparse.ArgumentParser) -> None:
    """Where frames come from and how: decoder, file playback, live freshness and reconnection."""
    group = run.add_argument_group("source")
    group.add_argument(
        "--decoder",
        choices=[d.value for d in DecoderKind],
        default="auto",
        help="auto: nvdec where CUDA and PyNvVideoCodec are present, else cpu (default)",
    )
    group.add_argument("--start", type=seconds, help="files: start at this time (seconds)")
    group.add_argument(
        "--end", type=seconds, help="files: stop at this time; live: stop after this many seconds"
    )
    group.add_argument("--stride", type=positive, default=1, help="files: keep every n-th frame")
    group.add_argument(
        "--realtime", action="store_true", help="files: replay at the native frame rate"
    )
    group.add_argument("--loop", action="store_true", help="files: start again at the end")
    group.add_argument(
        "--policy",
        choices=[p.value for p in FreshnessPolicy],
        help="when detection is slower than the stream: latest drops the oldest frame "
        "(live default), block waits (file default)",
    )
    group.add_argument(
        "--rtsp-transport", choices=["tcp", "udp"], default="tcp", help="default: tcp"
    )
    group.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        help="live: seconds to wait for a connection or for data (default 10)",
    )
    group.add_argument(
        "--watchdog",
        type=seconds,
        default=10.0,
        help="live: reconnect when no frame came for this many seconds (default 10)",
    )
    group.add_argument(
        "--reconnect-attempts",
        type=int,
        help="live: failed reconnections in a row before giving up (default: never give up)",
    )


def seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def source_options(args: argparse.Namespace) -> SourceOptions:
    return SourceOptions(
        decoder=DecoderKind(args.decoder),
        decoder_threads=args.decoder_threads,
        pixel_format=PixelFormat(args.pixel_format) if args.pixel_format else None,
        policy=FreshnessPolicy(args.policy) if args.policy else None,
        reconnect=ReconnectPolicy(
            watchdog_seconds=args.watchdog, max_attempts=args.reconnect_attempts
        ),
        rtsp_transport=args.rtsp_transport,
        open_timeout_seconds=args.timeout,
        read_timeout_seconds=args.timeout,
        realtime=args.realtime,
        loop=args.loop,
        start_seconds=args.start,
        end_seconds=args.end,
        stride=args.stride,
    )


class LiveStatus:
    """A status line in the log every ``interval`` seconds: state, rate and counters."""

    def __init__(self, source: Source, interval: float = 10.0) -> None:
        self.source = source
        self.interval = interval
        self._shown = time.monotonic()
        self._frames = 0

    def __call__(self, frames: int, elapsed: float) -> None:
        now = time.monotonic()
        if now - self._shown < self.interval:
            return
        fps = (frames - self._frames) / (now - self._shown)
        self._shown, self._frames = now, frames
        log.info(
            "%s: %s, %d frames, %.1f fps%s",
            self.source.stream_id,
            self.source.state.value,
            frames,
            fps,
            counters(self.source),
        )


def progress_for(source: Source, args: argparse.Namespace) -> Progress | None:
    """A progress line on a terminal for files, periodic status lines for live streams."""
    if args.quiet:
        return None
    if is_live(args.source):
        return LiveStatus(source)
    if sys.stderr.isatty():
        return ProgressLine(getattr(source, "frame_count", None))
    return None


def counters(source: Source) -> str:
    """The source's non-zero loss and recovery counters, for the summary and status lines."""
    stats = source.stats
    parts = [
        f"{stats.frames_dropped} dropped" if stats.frames_dropped else "",
        f"{stats.corrupt_packets} damaged packets skipped" if stats.corrupt_packets else "",
        f"{stats.reconnects} reconnects" if stats.reconnects else "",
    ]
    shown = ", ".join(p for p in parts if p)
    return f" ({shown})" if shown else ""


def run_command(args: argparse.Namespace) -> int:
    if args.config is not None:
        return run_config_command(args)
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
        intra_op_threads=args.threads,
        spin_wait=args.spin_wait,
    )
    source = open_source(args.source, device=detector.device, options=source_options(args))
    progress = progress_for(source, args)
    with JsonLinesSink(args.output) as sink:
        try:
            summary = run_detection(source, detector, sink, progress)
        finally:
            source.close()
            if isinstance(progress, ProgressLine):
                progress.clear()
    if not args.quiet:
        name = redact_uri(args.source) if is_live(args.source) else Path(args.source).name
        log.info("%s: %s on %s%s", name, summary, detector.device, counters(source))
    return EXIT_OK
