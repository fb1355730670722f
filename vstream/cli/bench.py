"""``vstream bench``: every figure of the throughput targets side by side, in one command.

One process, one video and model: each stage alone, the model alone as users
measure it, the whole pipeline with one and four streams, a naive loop,
memory over a long run, whole processes against the naive loop and
Ultralytics, and start-up times against importing torch; then every target
met or not (``--full`` runs all of it). With no arguments it runs on the
bundled demo assets, small enough to finish in well under a minute.
``--tune`` instead measures the plausible plans of concurrent runs, threads
and batch and prints the best as settings to paste.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from pathlib import Path
from typing import Any

from vstream import assets
from vstream.cli import doctor
from vstream.cli.args import EXIT_OK, input_file, positive
from vstream.cli.options import RUN_SECTIONS, add_flags, build_run_config
from vstream.config.sources import not_a_video_file
from vstream.errors import SourceError, VstreamError

_FLAGS: dict[str, Any] = {}
RSS_BASELINE_FRAMES = 1000
"""The soak compares resident memory after this many frames with the end of the run."""

FULL_SOAK_FRAMES = 20_000
FULL_PROCESS_SIZES = [320, 640]
DEFAULT_STREAMS = [1, 4]
TUNE_SECONDS = 60.0


def stream_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.replace(",", " ").split()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"stream counts must be integers, got {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"stream counts must be positive, got {text!r}")
    return counts


def soak_frames(text: str) -> int:
    """``--soak N``: more frames than the memory baseline, else its end is the baseline."""
    value = positive(text)
    if value <= RSS_BASELINE_FRAMES:
        raise argparse.ArgumentTypeError(
            f"must be more than {RSS_BASELINE_FRAMES} frames (RSS after "
            f"{RSS_BASELINE_FRAMES} is its baseline), got {text}"
        )
    return value


def image_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.replace(",", " ").split()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be integers, got {text!r}") from None
    if not sizes or sizes[0] < 32 or sizes[-1] > 4096:
        raise argparse.ArgumentTypeError(f"sizes must be in [32, 4096], got {text!r}")
    return sizes


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 5 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in [5, 3600] seconds, got {text!r}")
    return value


def add_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser(
        "bench",
        help="measure the pipeline against the model alone, a naive loop and Ultralytics",
        description="Measure, in one run on the same video and model: each stage alone, the "
        "model alone as users measure it (default session, batch 1), the pipeline end to end "
        "with several concurrent streams, a naive OpenCV/PyAV + numpy + session.run loop, and "
        "optionally memory over a long run, whole processes (vstream run, the naive loop, "
        "Ultralytics) and start-up times; then every throughput target, met or not. "
        "--tune measures the plausible plans instead and prints the best as settings.",
    )
    bench.add_argument(
        "--source",
        type=input_file,
        default=assets.SAMPLE_VIDEO,
        help="video file or vstream://NAME, a bundled one (default: the sample video)",
    )
    bench.add_argument(
        "--frames",
        type=doctor.frames,
        default=200,
        help=f"frames per run and per stream, 1 to {doctor.MAX_FRAMES}; short videos are looped "
        "(default 200)",
    )
    bench.add_argument(
        "--streams",
        type=stream_counts,
        help="concurrent stream counts for the end-to-end runs (default 1,4; --tune: 1)",
    )
    bench.add_argument(
        "--soak",
        type=soak_frames,
        metavar="N",
        help=f"also run one stream for N frames (more than {RSS_BASELINE_FRAMES}); RSS after "
        f"{RSS_BASELINE_FRAMES} vs after N",
    )
    bench.add_argument(
        "--ultralytics",
        action="store_true",
        help="also time whole processes start to exit: vstream run, the naive loop and "
        "Ultralytics predict, with their peak memory (needs pip install 'vstream[bench]')",
    )
    bench.add_argument(
        "--process-imgsz",
        type=image_sizes,
        metavar="SIZES",
        help="input sizes of the whole-process runs, e.g. 320,640 (default: the model's)",
    )
    bench.add_argument(
        "--startup",
        action="store_true",
        help="also time vstream --help, schema and validate against python -c 'import torch'",
    )
    bench.add_argument(
        "--full",
        action="store_true",
        help=f"everything the targets need: --ultralytics --startup --soak {FULL_SOAK_FRAMES} "
        f"--streams 1,4 --process-imgsz {','.join(map(str, FULL_PROCESS_SIZES))} "
        "(unless given otherwise); long",
    )
    bench.add_argument(
        "--tune",
        action="store_true",
        help="measure the plausible plans (concurrent runs x threads, batch) end to end and "
        "print the best as settings to paste",
    )
    bench.add_argument(
        "--tune-seconds",
        type=seconds,
        default=TUNE_SECONDS,
        help=f"time budget of --tune, shared by the plans (default {TUNE_SECONDS:g})",
    )
    bench.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _FLAGS.update(add_flags(bench.add_argument_group("model and runtime"), RUN_SECTIONS[:3]))
    _FLAGS.update(
        add_flags(bench.add_argument_group("source"), RUN_SECTIONS[3:], only={"--decoder-threads"})
    )
    bench.set_defaults(handler=bench_command)


def _check(args: argparse.Namespace) -> None:
    if (problem := not_a_video_file(args.source)) is not None:
        if ":/" in str(args.source):  # a URL, its credentials too: not said back
            raise SourceError("--source takes a video file, not a URL")
        raise SourceError(problem)
    if args.process_imgsz is not None and not args.ultralytics:
        sizes = ",".join(map(str, args.process_imgsz))
        raise VstreamError(
            f"--process-imgsz {sizes} sizes the whole-process runs: give --ultralytics too"
        )
    if args.ultralytics:
        import importlib.util

        if importlib.util.find_spec("ultralytics") is None:
            raise VstreamError(
                "--ultralytics needs the ultralytics package: pip install 'vstream[bench]'"
            )


def _apply_full(args: argparse.Namespace) -> None:
    """``--full``: every part the targets need, where not given otherwise."""
    if not args.full:
        return
    args.ultralytics = args.startup = True
    args.soak = args.soak or FULL_SOAK_FRAMES
    args.streams = args.streams or DEFAULT_STREAMS
    args.process_imgsz = args.process_imgsz or FULL_PROCESS_SIZES


def _given_run_flags(args: argparse.Namespace) -> list[str]:
    """The model and runtime flags given to the bench, as ``vstream run`` takes them."""
    argv: list[str] = []
    for flag, option in _FLAGS.items():
        if flag in ("--model", "--imgsz") or not hasattr(args, option.dest):
            continue
        value = getattr(args, option.dest)
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, list):
            argv.append(f"{flag}={','.join(map(str, value))}")
        else:
            argv.append(f"{flag}={value.value if isinstance(value, enum.Enum) else value}")
    return argv


def bench_command(args: argparse.Namespace) -> int:
    _apply_full(args)
    _check(args)
    config = build_run_config(
        args, _FLAGS, source=str(args.source), output=None, model=assets.DEMO_MODEL
    )
    pipeline = config.pipelines[0]
    import torch  # after the arguments are checked: a typo is said without 2 s of loading

    from vstream.detector import Detector

    # torch's threads as the engine sets them (--torch-threads), for the stages measured
    # alone and the pipeline alike.
    torch.set_num_threads(pipeline.runtime.torch_threads)
    if args.tune:
        return _tune(args, pipeline)
    detector = Detector.from_config(pipeline.model, pipeline.postprocess, pipeline.runtime)
    results = _measure(args, pipeline, detector)
    if args.json:
        from vstream.bench.report import to_json

        json.dump(to_json(results), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from vstream.bench.report import render

        print(render(results))
    return EXIT_OK


def _tune(args: argparse.Namespace, pipeline: Any) -> int:
    from vstream.bench.tune import render_tuning, tune
    from vstream.cores import available_cores
    from vstream.detector import Detector

    probe = Detector.from_config(pipeline.model, pipeline.postprocess, pipeline.runtime)
    found = tune(
        pipeline.model,
        pipeline.postprocess,
        pipeline.runtime,
        args.source,
        streams=max(args.streams or [1]),
        budget_seconds=args.tune_seconds,
        device=probe.device.type,
        cores=available_cores(),
        fixed_batch=probe.model.spec.fixed_batch,
        decoder_threads=pipeline.sources[0].decoder_threads,
    )
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_tuning(found, args.source))
    return EXIT_OK


def _video(path: Path) -> tuple[str, bool]:
    """The video in words, and whether it is what the whole-process targets are stated for."""
    from vstream.sources import VideoFileSource

    with VideoFileSource(path) as source:
        info = source.info
    frames = info.frame_count
    text = f"{info.width}x{info.height} {info.codec}, {frames or 'unknown'} frames"
    return text, info.height == 720 and info.codec == "h264" and (frames or 0) >= 1000


def _measure(args: argparse.Namespace, pipeline: Any, detector: Any) -> Any:
    from vstream.bench.endtoend import end_to_end
    from vstream.bench.measure import peak_rss_bytes
    from vstream.bench.naive import run_naive, unfit
    from vstream.bench.report import WHOLE_PROCESS_VIDEO, BenchResults
    from vstream.bench.stages import (
        decode_only,
        held_frames,
        inference_only,
        model_alone,
        postprocess_only,
        preprocess_only,
    )

    model, decoder_threads = Path(pipeline.model.path), pipeline.sources[0].decoder_threads
    width = detector.model.input_size[1]
    frames = args.frames
    video, whole_process_video = _video(args.source)
    notes = []
    # Before anything is measured: a model the naive loop cannot run costs its row only.
    naive_unfit = unfit(detector)
    if naive_unfit is not None:
        notes.append(f"the naive loop did not run: {naive_unfit}")
    startup = None
    if args.startup:  # first, while nothing else of the bench runs
        from vstream.bench.startup import startup_times

        startup = startup_times(model, args.source)
    held = held_frames(args.source, detector.device)
    stages = {
        "decode": decode_only(args.source, detector.device, frames, decoder_threads),
        "preprocess": preprocess_only(detector, held, frames),
        "inference": inference_only(detector, held, frames),
        "postprocess": postprocess_only(detector, held, frames),
    }
    alone = model_alone(model, detector, held, frames)
    naive = run_naive(args.source, model, width, 0, frames) if naive_unfit is None else None
    streams = {
        n: end_to_end(detector, args.source, n, frames, decoder_threads=decoder_threads)
        for n in args.streams or DEFAULT_STREAMS
    }
    soak = None
    if args.soak is not None:
        soak = end_to_end(
            detector,
            args.source,
            1,
            args.soak,
            decoder_threads=decoder_threads,
            rss_at=RSS_BASELINE_FRAMES,
        )
    processes = None
    if args.ultralytics:
        from vstream.bench.processes import compare_processes

        run_flags = _given_run_flags(args)
        processes = {
            size: compare_processes(
                args.source, model, size, run_flags, naive=naive_unfit is None, ultralytics=True
            )
            for size in args.process_imgsz or [width]
        }
        if not whole_process_video:
            notes.append(
                f"the whole-process targets are stated for {WHOLE_PROCESS_VIDEO}; "
                f"this one is {video}"
            )
    results = BenchResults(
        config={
            "model": str(model),
            "source": str(args.source),
            "video": video,
            "imgsz": width,
            "batch": detector.batch_size,
            "buckets": list(detector.model.bucket_sizes),
            "plan": detector.plan.describe(),
            "concurrent_runs": detector.plan.concurrent_runs,
            "threads": detector.plan.threads_per_run,
            "decoder_threads": decoder_threads,
            "spin_wait": detector.config.spin_wait,
            "batch_timeout": detector.runtime.batch_timeout_seconds,
            "device": str(detector.device),
            "frames": frames,
            "streams": list(streams),
        },
        stages=stages,
        model_alone=alone,
        end_to_end=streams,
        naive=naive,
        peak_rss_bytes=peak_rss_bytes(),
        soak=soak,
        processes=processes,
        startup=startup,
        notes=notes,
    )
    if naive is not None and naive.frames < frames:
        results.notes.append(f"the naive loop reads the video once: {naive.frames} frames")
    return results
