"""``vstream run``: detect objects in a video or a pipelines file, one JSON record per frame.

``vstream run --source X [flags]`` builds a one-pipeline, one-source config
from its flags (:mod:`vstream.cli.options`); ``vstream run CONFIG`` reads one.
Both run the same engine until their streams end, or until SIGTERM/SIGINT:
the first signal stops intake, finishes the frames in flight, flushes every
sink and prints the summary; a second one cuts that short
(:mod:`vstream.engine.signals`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from vstream import assets
from vstream.cli.args import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNEXPECTED
from vstream.cli.options import (
    RUN_SECTIONS,
    RunExtras,
    add_flags,
    appearance_help,
    build_run_config,
    int_list,
    line_spec,
    on_classes_help,
    secondary_help,
    zone_spec,
)
from vstream.config.sinks import fill
from vstream.engine.signals import FORCED_FLUSH_SECONDS
from vstream.errors import VstreamError
from vstream.uri import is_live, publish_display, redact, webhook_display

log = logging.getLogger("vstream")

DEFAULTS = {
    "--model": "vstream://demo.onnx, the bundled demo detector",
    "--source": "vstream://sample.mp4, the bundled sample video",
}
"""What ``run`` reads when not told, as its help names them."""

_FLAGS: dict[str, Any] = {}
"""The flags made from the config models (:mod:`vstream.cli.options`), by flag."""
_OWN: dict[str, str] = {}
"""``run``'s own flags (a source, outputs, tracking shortcuts), by flag: their ``args`` names."""


def _own(group: Any, *names: str, **options: Any) -> None:
    """Add one of ``run``'s own flags, noting it: with a config file, none of them may be given."""
    action = group.add_argument(*names, **options)
    _OWN[action.option_strings[0]] = action.dest


def add_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="detect objects in a video, one JSON record per frame",
        description="Detect objects in every frame of a video and write JSON Lines. "
        "With no arguments, runs the bundled demo model on the bundled sample video. "
        "With a pipelines file (YAML), runs every pipeline in it until its sources end. "
        "SIGTERM or SIGINT stops taking frames, finishes those in flight, flushes the "
        "output and prints the summary; a second signal cuts that short (the sinks get "
        f"{FORCED_FLUSH_SECONDS:g} s more for what they hold, then exit 128 + signal).",
    )
    run.add_argument(
        "config",
        type=Path,
        nargs="?",
        help="pipelines file (see vstream validate); the other options then come from it",
    )
    _own(
        run,
        "--source",
        default=argparse.SUPPRESS,
        help="video file (relative to the working folder), rtsp:// or http(s):// URL, "
        f"/dev/videoN, or vstream://NAME, a bundled one (default: {DEFAULTS['--source']})",
    )
    _own(
        run,
        "--output",
        "-o",
        default=argparse.SUPPRESS,
        help="JSON Lines file, replaced if it exists (default: stdout)",
    )
    _own(
        run,
        "--save-video", default=argparse.SUPPRESS, metavar="PATH.mp4|rtmp://HOST/APP/KEY",
        help="also write the annotated video (every frame, boxes, labels, tracks, lines, "
        "counts), or publish it live to an RTMP server",
    )  # fmt: skip
    _own(
        run,
        "--clips", default=argparse.SUPPRESS, metavar="DIR",
        help="write an event clip (original video, pre- and post-roll) and a snapshot per event",
    )  # fmt: skip
    run.add_argument("--quiet", "-q", action="store_true", help="no progress or summary")
    groups = {
        "model": run.add_argument_group("model"),
        "postprocess": run.add_argument_group("postprocessing"),
        "runtime": run.add_argument_group("runtime"),
        "sources": run.add_argument_group("source"),
        "analytics": run.add_argument_group("tracking and counting"),
    }
    _own(
        groups["analytics"], "--track", action="store_true", default=argparse.SUPPRESS,
        help="track objects: each detection on a confirmed track gets a track_id",
    )  # fmt: skip
    _own(
        groups["analytics"], "--line", type=line_spec, action="append", default=argparse.SUPPRESS,
        metavar="NAME=X1,Y1,X2,Y2",
        help="count crossings of this segment (pixels; repeatable); 'in' is crossing from the "
        "left of the segment, looking from its start to its end, to its right",
    )  # fmt: skip
    _own(
        groups["analytics"], "--zone", type=zone_spec, action="append", default=argparse.SUPPRESS,
        metavar="NAME=X1,Y1,X2,Y2,X3,Y3,...",
        help="a zone: polygon corners in order (pixels; repeatable); objects entering, leaving "
        "and their dwell become events, its occupancy goes in each record",
    )  # fmt: skip
    cascade = run.add_argument_group("cascade (secondary models)")
    _own(
        cascade, "--secondary", action="append", default=argparse.SUPPRESS, metavar="PATH.onnx",
        help=secondary_help(),
    )  # fmt: skip
    _own(
        cascade, "--on-classes", type=int_list, default=argparse.SUPPRESS, metavar="ID,ID",
        help=on_classes_help(),
    )  # fmt: skip
    _own(
        cascade, "--appearance", default=argparse.SUPPRESS, metavar="PATH.onnx",
        help=appearance_help(),
    )  # fmt: skip
    for prefix, model in RUN_SECTIONS:
        _FLAGS.update(add_flags(groups[str(prefix[2])], ((prefix, model),), defaults=DEFAULTS))
    run.set_defaults(handler=run_command)


TERMINAL_FROM_SECONDS = 1.0
"""On a terminal the progress line appears only once a run has lasted this long."""
TERMINAL_REDRAW_SECONDS = 0.25


class Progress:
    """How far a ``vstream run`` has come, on stderr, only where a run is long.

    On a terminal: one line redrawn in place from a second into the run, and
    cleared at its end. Elsewhere (a log file, CI, a container): a log line every
    ``every`` seconds (``logging.progress_seconds``), the first after ``every``
    seconds, so a short run prints nothing. Percent and ETA are given where the
    frames to come are known (files that declare their frame count).
    """

    def __init__(self, *, every: float, terminal: bool) -> None:
        self.every = every
        self.terminal = terminal
        self._shown = 0.0
        self._frames = 0
        self._drawn = False

    def __call__(self, frames: int, total: int | None, elapsed: float, state: str) -> None:
        """The run has processed ``frames`` of ``total`` (None: unknown) in ``elapsed`` s."""
        if self.terminal:
            if elapsed < TERMINAL_FROM_SECONDS or elapsed - self._shown < TERMINAL_REDRAW_SECONDS:
                return
            self._shown, self._drawn = elapsed, True
            sys.stderr.write(f"\rvstream: {progress_text(frames, total, elapsed, state)} \033[K")
            sys.stderr.flush()
        elif self.every > 0 and elapsed - self._shown >= self.every:
            # The rate of the last period: what the ETA of a live-like, changing load needs.
            rate = (frames - self._frames) / (elapsed - self._shown)
            self._shown, self._frames = elapsed, frames
            log.info("%s", progress_text(frames, total, elapsed, state, rate))

    def clear(self) -> None:
        if self._drawn:
            sys.stderr.write("\r\033[K")


def progress_text(
    frames: int, total: int | None, elapsed: float, state: str, fps: float | None = None
) -> str:
    """``120/200 frames (60%), 29.1 fps, ETA 3 s`` for files; ``streaming, 1200 frames,
    25.0 fps`` where the frames to come are unknown. ``fps`` defaults to the whole run's."""
    if fps is None:
        fps = frames / elapsed if elapsed > 0 else 0.0
    if not total:
        return f"{state}, {frames} frames, {fps:.1f} fps"
    left = max(0, total - frames)
    eta = f", ETA {duration_text(left / fps)}" if fps > 0 else ""
    return f"{frames}/{total} frames ({100 * min(frames, total) // total}%), {fps:.1f} fps{eta}"


def duration_text(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: as precise as an estimate deserves."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def run_command(args: argparse.Namespace) -> int:
    from vstream.config import load_config
    from vstream.engine.signals import ShutdownSignals
    from vstream.logs import setup_logging

    given = sorted(f for f, dest in _OWN.items() if hasattr(args, dest)) + sorted(
        f for f, o in _FLAGS.items() if hasattr(args, o.dest)
    )
    if args.config is not None:
        if given:
            raise VstreamError(
                f"{', '.join(given)} cannot be combined with a config file: set them in the config"
            )
        config = load_config(args.config)
        base_dir = args.config.resolve().parent
        setup_logging(config.logging.format, "warning" if args.quiet else config.logging.level)
    else:
        source = getattr(args, "source", str(assets.SAMPLE_VIDEO))
        extras = RunExtras(
            track=getattr(args, "track", False),
            lines=tuple(getattr(args, "line", ())),
            zones=tuple(getattr(args, "zone", ())),
            save_video=getattr(args, "save_video", None),
            clips=getattr(args, "clips", None),
            secondary=tuple(getattr(args, "secondary", ())),
            on_classes=getattr(args, "on_classes", None),
            appearance=getattr(args, "appearance", None),
        )
        config = build_run_config(
            args,
            _FLAGS,
            source=source,
            output=getattr(args, "output", None),
            model=assets.DEMO_MODEL,
            extras=extras,
        )
        base_dir = Path.cwd()
        setup_logging("text", "warning" if args.quiet else "info")
    # One summary line per stream: the engine's and sinks' progress notes are for daemons.
    # The answer to a signal (stopping; send it again to cut the stop short) is for whoever
    # sent it, who otherwise sees nothing while the sinks flush.
    for name in ("vstream.engine", "vstream.sinks", "vstream.cluster"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("vstream.engine.signals").setLevel(logging.getLogger().level)
    signals = ShutdownSignals().install()
    try:
        return _run(config, base_dir, signals, quiet=args.quiet, single=args.config is None)
    finally:
        signals.restore()


def _run(config: Any, base_dir: Path, signals: Any, *, quiet: bool, single: bool) -> int:
    from vstream.cluster import open_engine

    engine = open_engine(config, base_dir=base_dir)
    signals.on_force = engine.hurry
    progress: Progress | None = None
    try:
        engine.start()
        if not quiet:
            every = config.logging.progress_seconds
            progress = Progress(every=every, terminal=sys.stderr.isatty())
        total: int | None = None
        while not signals.requested.wait(0.2):
            if progress is not None:
                streams = engine.summary()
                total = total or _expected_frames(engine)  # known once every file is open
                states = {s.state for s in streams}
                state = states.pop() if len(states) == 1 else f"{len(streams)} streams"
                frames = sum(s.frames for s in streams)
                progress(frames, total, engine.elapsed_seconds, state)
            if engine.files_done():
                break
    finally:
        if progress is not None:
            progress.clear()
        engine.stop()
    status = _report(engine, config, signals.received, quiet=quiet, single=single)
    return status if signals.exit_status is None else signals.exit_status


_SHOWN = {"jsonl": "records", "clips": "event clips"}


def _outputs(config: Any, engine: Any) -> list[str]:
    """Where the run's records, videos and clips went, for the summary's last line.

    Every sink of every pipeline, once per place (a ``{stream}`` path is a file per
    stream): files as the user can open them (relative to the working folder when
    below it, which a config's own relative paths need not be), live videos with what
    they published, network sinks by their address without credentials.
    """
    places: list[str] = []
    for pipeline in config.pipelines:
        for sink in pipeline.sinks:
            for source in pipeline.sources:
                place = _place(sink, engine, source.id, pipeline.name)
                if place not in places:
                    places.append(place)
    return places


def _place(sink: Any, engine: Any, stream: str, pipeline: str) -> str:
    """Where one sink put one stream's output, as the summary names it."""
    from vstream.sinks.video.writer import VideoWriterStats, file_outcome, publish_outcome

    def filled(template: str) -> str:
        return fill(template, stream=stream, pipeline=pipeline)

    if sink.type == "stdout":
        return "records on stdout"
    if sink.type == "mqtt":
        return f"records to mqtt {sink.host}:{sink.port} topic {filled(sink.topic)}"
    if sink.type == "redis":
        return f"records to redis {redact(sink.url)} stream {filled(sink.stream)}"
    if sink.type == "webhook":
        return f"records to webhook {webhook_display(sink.url)}"
    if sink.type == "video" and sink.live:
        target = publish_display(filled(sink.path))
        # No counters: the writer never opened, as no frame reached it.
        stats = engine.finished_videos().get(target, VideoWriterStats())
        return f"annotated video {publish_outcome(target, stats)}"
    path = shown = Path(filled(getattr(sink, "path", None) or sink.directory))
    with contextlib.suppress(ValueError):
        shown = path.relative_to(Path.cwd())
    if sink.type == "video":
        stats = engine.finished_videos().get(str(path))
        return f"annotated video {file_outcome(str(shown), stats)}"
    return f"{_SHOWN[sink.type]} {shown}"


def _expected_frames(engine: Any) -> int | None:
    """Frames the run will process, when every stream is a file that declares its frame
    count and is open (its start, end and stride applied); else None."""
    total = 0
    for reader in engine.readers():
        count, source = reader.expected_frames, reader.config
        if count is None or source is None or source.loop:
            return None
        if source.start_seconds is not None or source.end_seconds is not None:
            fps = reader.source_fps
            if fps is None:
                return None
            first = round((source.start_seconds or 0.0) * fps)
            last = (
                count if source.end_seconds is None else min(count, round(source.end_seconds * fps))
            )
            count = max(0, last - first)
        total += -(-count // source.stride)
    return total or None


def _failed(failures: list[BaseException]) -> int:
    """The exit status of a run that ended on ``failures``: bad input, or a bug."""
    return EXIT_BAD_INPUT if isinstance(failures[0], VstreamError) else EXIT_UNEXPECTED


def _report(engine: Any, config: Any, received: int | None, *, quiet: bool, single: bool) -> int:
    """The summary lines, and the exit status they amount to."""
    failures = engine.failures()
    if any(isinstance(f, BrokenPipeError) for f in failures):
        # The reader of stdout went away (e.g. `| head`): stop quietly, unless something
        # else failed too (logged where it happened), which the exit status still says.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        failures = [f for f in failures if not isinstance(f, BrokenPipeError)]
        if not failures:
            return EXIT_OK
        return _failed(failures)
    elapsed = engine.elapsed_seconds
    for stream in engine.summary():
        if quiet or stream.error is not None:
            continue
        name = stream.id
        if single:
            uri = config.pipelines[0].sources[0].uri
            name = redact(uri) if is_live(uri) else Path(uri).name
        fps = stream.frames / elapsed if elapsed > 0 else 0.0
        extra = [
            f"{stream.dropped} dropped" if stream.dropped else "",
            f"{stream.packets_skipped} skipped undecoded (before a key frame)"
            if stream.packets_skipped
            else "",
            f"{stream.failed_frames} failed" if stream.failed_frames else "",
        ]
        shown = ", ".join(e for e in extra if e)
        log.info(
            "%s: %d frames, %d detections, %.1f s, %.1f fps on %s%s",
            name,
            stream.frames,
            stream.detections,
            elapsed,
            fps,
            engine.device,
            f" ({shown})" if shown else "",
        )
        if stream.cadence:
            log.info(
                "%s: detected %d of %d frames (%.0f %%): %d predicted, %d of them for no "
                "motion, %d under load",
                stream.id,
                stream.cadence["frames_detected"],
                stream.cadence["frames_detected"] + stream.cadence["frames_predicted"],
                100 * (stream.cadence["detection_rate"] or 0.0),
                stream.cadence["frames_predicted"],
                stream.cadence["frames_motion_skipped"],
                stream.cadence["frames_adapted"],
            )
        for model, counts in stream.attributes.items():
            seen = ", ".join(f"{label} {n}" for label, n in counts["labels"].items())
            log.info(
                "%s: %s read %d objects in %d runs (%.2f s), carried %d readings%s",
                stream.id,
                model,
                counts["fresh"],
                counts["runs"],
                counts["seconds"],
                counts["cached"],
                f": {seen}" if seen else "",
            )
    for reader in engine.readers() if not quiet else ():
        totals = reader.analytics.line_totals() if reader.analytics is not None else {}
        for line, directions in totals.items():
            counted = {d: sum(by_class.values()) for d, by_class in directions.items()}
            log.info("%s: line %s: %d in, %d out", reader.id, line, counted["in"], counted["out"])
    outages = engine.outages()  # each sink said what it dropped as it closed
    if not quiet and not failures and not outages:
        log.info("outputs: %s", "; ".join(_outputs(config, engine)))
    if failures:  # each was logged once, as one line, where it happened
        return _failed(failures)
    if outages:
        log.error("records not delivered: %s", "; ".join(outages))
        return EXIT_BAD_INPUT
    if received == signal.SIGINT:
        return 130
    return EXIT_OK
