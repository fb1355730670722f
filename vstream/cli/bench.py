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

import torch

from vstream import assets
from vstream.bench.endtoend import RSS_BASELINE_FRAMES, end_to_end
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
from vstream.cli.args import EXIT_OK, add_thread_options, positive
from vstream.errors import SourceError, VstreamError
from vstream.inference.model import declared_batch
from vstream.pipeline import Detector
from vstream.pipeline.stages import DEFAULT_BATCH_TIMEOUT

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
        "--model", type=Path, default=assets.DEMO_MODEL, help="ONNX detector (default: demo)"
    )
    bench.add_argument(
        "--source",
        type=Path,
        default=assets.SAMPLE_VIDEO,
        help="video file (default: the sample video)",
    )
    bench.add_argument("--imgsz", type=positive, help="model input size (default: the model's)")
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
        "--batch",
        type=positive,
        help=f"max batch (default {DEFAULT_BATCH}, or the batch a model fixes)",
    )
    bench.add_argument(
        "--batch-timeout",
        type=float,
        default=DEFAULT_BATCH_TIMEOUT,
        help=f"seconds a partial batch waits for frames (default {DEFAULT_BATCH_TIMEOUT})",
    )
    bench.add_argument("--device", default="cpu", help="auto, cpu or cuda (default cpu)")
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
    add_thread_options(bench)
    bench.set_defaults(handler=bench_command)


def _check(args: argparse.Namespace) -> None:
    if not args.source.is_file():
        raise SourceError(f"video file not found: {args.source}")
    if args.batch_timeout < 0:
        raise VstreamError("--batch-timeout must not be negative")
    if args.ultralytics:
        import importlib.util

        if importlib.util.find_spec("ultralytics") is None:
            raise VstreamError(
                "--ultralytics needs the ultralytics package: pip install 'vstream[bench]'"
            )


def bench_command(args: argparse.Namespace) -> int:
    _check(args)
    # The stage threads run torch on one thread each; the stages measured alone do the same.
    torch.set_num_threads(1)
    detector = Detector(
        args.model,
        device=args.device,
        imgsz=args.imgsz,
        batch_size=args.batch or declared_batch(args.model) or DEFAULT_BATCH,
        intra_op_threads=args.threads,
        spin_wait=args.spin_wait,
    )
    height, width = detector.engine.input_size
    if height != width:
        raise VstreamError(f"the naive baseline needs a square model input, got {width}x{height}")
    frames = args.frames
    held = held_frames(args.source, detector.device)
    stages = {
        "decode": decode_only(args.source, detector.device, frames, args.decoder_threads),
        "preprocess": preprocess_only(detector, held, frames),
        "inference": inference_only(detector, held, frames),
        "postprocess": postprocess_only(detector, held, frames),
    }
    naive = run_naive(args.source, args.model, width, args.threads, frames)
    streams = {
        n: end_to_end(
            detector,
            args.source,
            n,
            frames,
            batch_timeout=args.batch_timeout,
            decoder_threads=args.decoder_threads,
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
            batch_timeout=args.batch_timeout,
            decoder_threads=args.decoder_threads,
            rss_at=min(RSS_BASELINE_FRAMES, args.soak),
        )
    processes = None
    if args.ultralytics:
        from vstream.bench.processes import compare_processes

        run_options = [
            f"--batch={detector.batch_size}",
            f"--threads={args.threads}",
            f"--decoder-threads={args.decoder_threads}",
            *(["--spin-wait"] if args.spin_wait else []),
        ]
        processes = compare_processes(args.source, args.model, width, args.threads, run_options)
    results = BenchResults(
        config={
            "model": str(args.model),
            "source": str(args.source),
            "imgsz": width,
            "batch": detector.batch_size,
            "buckets": list(detector.engine.bucket_sizes),
            "threads": args.threads,
            "decoder_threads": args.decoder_threads,
            "spin_wait": args.spin_wait,
            "batch_timeout": args.batch_timeout,
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
