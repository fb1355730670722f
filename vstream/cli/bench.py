"""``vstream bench``: every stage alone, end to end with 1/2/4 streams, and baselines.

One command, one process, one video and model: the figures BENCHMARKS.md
quotes. With no arguments it runs on the bundled demo assets, small enough
to finish in well under a minute.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vstream import assets
from vstream.cli.args import EXIT_OK, positive
from vstream.cli.options import RUN_SECTIONS, add_flags, build_run_config
from vstream.errors import SourceError, VstreamError

_FLAGS: dict[str, Any] = {}
RSS_BASELINE_FRAMES = 1000
"""The soak compares resident memory after this many frames with the end of the run."""

DEFAULT_BATCH = 4


def stream_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.replace(",", " ").split()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"stream counts must be integers, got {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"stream counts must be positive, got {text!r}")
    return counts


def add_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser(
        "bench",
        help="measure decode, preprocess, model, end to end and a naive baseline side by side",
        description="Measure, in one run on the same video and model: each stage alone, "
        "the overlapped pipeline end to end with several concurrent streams, and a naive "
        "OpenCV/PyAV + numpy + session.run loop. Reports fps, latency percentiles, ratios, "
        "CPU time per frame, bytes handed to the host and memory.",
    )
    bench.add_argument(
        "--source",
        type=Path,
        default=assets.SAMPLE_VIDEO,
        help="video file (default: the sample video)",
    )
    bench.add_argument(
        "--frames",
        type=positive,
        default=200,
        help="frames per run and per stream; short videos are looped (default 200)",
    )
    bench.add_argument(
        "--streams",
        type=stream_counts,
        default=[1, 2, 4],
        help="concurrent stream counts for the end-to-end runs (default 1,2,4)",
    )
    bench.add_argument(
        "--soak",
        type=positive,
        metavar="N",
        help=f"also run one stream for N frames; RSS after {RSS_BASELINE_FRAMES} vs after N",
    )
    bench.add_argument(
        "--ultralytics",
        action="store_true",
        help="also time whole processes: vstream run, the naive loop, Ultralytics predict "
        "(needs pip install 'vstream[bench]')",
    )
    bench.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _FLAGS.update(add_flags(bench.add_argument_group("model and runtime"), RUN_SECTIONS[:3]))
    _FLAGS.update(
        add_flags(bench.add_argument_group("source"), RUN_SECTIONS[3:], only={"--decoder-threads"})
    )
    bench.set_defaults(handler=bench_command)


def _check(args: argparse.Namespace) -> None:
    if not args.source.is_file():
        raise SourceError(f"video file not found: {args.source}")
    if args.ultralytics:
        import importlib.util

        if importlib.util.find_spec("ultralytics") is None:
            raise VstreamError(
                "--ultralytics needs the ultralytics package: pip install 'vstream[bench]'"
            )


def bench_command(args: argparse.Namespace) -> int:
    import torch

    from vstream.bench.endtoend import end_to_end
    from vstream.bench.measure import peak_rss_bytes
    from vstream.bench.naive import run_naive
    from vstream.bench.report import BenchResults, render, to_json
    from vstream.bench.stages import (
        decode_only,
        held_frames,
        inference_only,
        postprocess_only,
        preprocess_only,
    )
    from vstream.detector import Detector

    _check(args)
    config = build_run_config(
        args, _FLAGS, source=str(args.source), output=None, model=assets.DEMO_MODEL
    )
    pipeline = config.pipelines[0]
    model, decoder_threads = pipeline.model.path, pipeline.sources[0].decoder_threads
    # The stage threads run torch on one thread each; the stages measured alone do the same.
    torch.set_num_threads(1)
    detector = Detector.from_config(pipeline.model, pipeline.postprocess, pipeline.runtime)
    threads = detector.config.intra_op_threads
    height, width = detector.model.input_size
    if height != width:
        raise VstreamError(f"the naive baseline needs a square model input, got {width}x{height}")
    frames = args.frames
    held = held_frames(args.source, detector.device)
    stages = {
        "decode": decode_only(args.source, detector.device, frames, decoder_threads),
        "preprocess": preprocess_only(detector, held, frames),
        "inference": inference_only(detector, held, frames),
        "postprocess": postprocess_only(detector, held, frames),
    }
    naive = run_naive(args.source, Path(model), width, threads, frames)
    streams = {
        n: end_to_end(
            detector,
            args.source,
            n,
            frames,
            decoder_threads=decoder_threads,
        )
        for n in args.streams
    }
    soak = None
    if args.soak is not None:
        soak = end_to_end(
            detector,
            args.source,
            1,
            args.soak,
            decoder_threads=decoder_threads,
            rss_at=min(RSS_BASELINE_FRAMES, args.soak),
        )
    processes = None
    if args.ultralytics:
        from vstream.bench.processes import compare_processes

        run_options = [
            f"--batch={detector.batch_size}",
            f"--threads={threads}",
            f"--decoder-threads={decoder_threads}",
            *(["--spin-wait"] if detector.config.spin_wait else []),
        ]
        processes = compare_processes(args.source, Path(model), width, threads, run_options)
    results = BenchResults(
        config={
            "model": str(model),
            "source": str(args.source),
            "imgsz": width,
            "batch": detector.batch_size,
            "buckets": list(detector.model.bucket_sizes),
            "threads": threads,
            "decoder_threads": decoder_threads,
            "spin_wait": detector.config.spin_wait,
            "batch_timeout": detector.runtime.batch_timeout_seconds,
            "device": str(detector.device),
            "frames": frames,
            "streams": args.streams,
        },
        stages=stages,
        end_to_end=streams,
        naive=naive,
        peak_rss_bytes=peak_rss_bytes(),
        soak=soak,
        processes=processes,
    )
    if naive.frames < frames:
        results.notes.append(f"the naive loop reads the video once: {naive.frames} frames")
    if args.json:
        json.dump(to_json(results), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(results))
    return EXIT_OK
