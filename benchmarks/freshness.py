"""How old a live frame is when its record leaves: capture to record, against a real RTSP server.

Runs GStreamer's RTSP server (tests/rtsp_server.py, 25 fps, 320x240) on
127.0.0.1 and the engine on N copies of that stream with the demo model, and
reports the capture-to-record age that ``vstream_frame_age_seconds`` exports
(p50 and p95 of every record, measured per record here), with the frames
the ``latest`` policy dropped. ``--slow-model S`` adds S seconds to every
model run, to show what a pipeline slower than its cameras does;
``--slow-decode S`` adds S seconds to every picture the CPU decoder hands out,
to show a stream whose decoding is slower than its camera, where
``--max-behind`` (seconds, or ``null``) bounds its backlog by skipping packets
(``packets_skipped``).

    .venv/bin/python benchmarks/freshness.py [--streams 1 4] [--seconds 20] [--policy latest]
        [--concurrent-runs N] [--slow-model S] [--slow-decode S] [--max-behind 2|null]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import RtspServer, slow_decoding  # noqa: E402

from vstream import assets  # noqa: E402
from vstream.config import parse_data  # noqa: E402
from vstream.engine import Engine  # noqa: E402


def measure(
    url: str,
    streams: int,
    seconds: float,
    policy: str,
    slow: float,
    runs: int | None,
    max_behind: float | None,
) -> dict:
    runtime = {"device": "cpu", "batch_size": max(1, streams), "concurrent_runs": runs}
    config = parse_data(
        {
            "pipelines": [
                {
                    "name": "live",
                    "model": {"path": str(assets.DEMO_MODEL)},
                    "runtime": {k: v for k, v in runtime.items() if v is not None},
                    "sources": [
                        {
                            "id": f"cam{i}",
                            "uri": url,
                            "policy": policy,
                            "decoder": "cpu",
                            "max_behind_seconds": max_behind,
                        }
                        for i in range(streams)
                    ],
                    "sinks": [{"type": "jsonl", "path": "/dev/null"}],
                }
            ]
        }
    )
    engine = Engine(config)
    pipeline = engine.pipelines["live"]
    ages: list[float] = []
    real_deliver = pipeline._deliver

    def deliver(batch):
        now = time.time()
        ages.extend(now - a.captured_at for a in batch.arrivals)
        return real_deliver(batch)

    pipeline._deliver = deliver
    pipeline.stages._deliver = deliver
    if slow:
        real_infer = pipeline.detector.infer

        def infer(buffer: int, frames: int):
            time.sleep(slow)
            return real_infer(buffer, frames)

        pipeline.detector.infer = infer
    engine.start()
    time.sleep(3.0)  # connect and warm up; measure the steady state only
    ages.clear()
    time.sleep(seconds)
    readers = engine.readers()
    dropped = sum(r.frames_dropped for r in readers)
    decoded = sum(r.source_stats.frames_decoded for r in readers)
    skipped = sum(r.packets_skipped for r in readers)
    engine.stop(timeout=30)
    ordered = sorted(ages)
    return {
        "streams": streams,
        "policy": policy,
        "slow_model_s": slow,
        "max_behind_s": max_behind,
        "plan": pipeline.detector.plan.runs_text,
        "records": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 1) if ordered else None,
        "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 1) if ordered else None,
        "dropped": dropped,
        "decoded": decoded,
        "packets_skipped": skipped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--policy", choices=["latest", "block"], default="latest")
    parser.add_argument("--slow-model", type=float, default=0.0, metavar="S")
    parser.add_argument("--concurrent-runs", type=int, help="default: the automatic plan")
    parser.add_argument("--slow-decode", type=float, default=0.0, metavar="S")
    parser.add_argument(
        "--max-behind",
        type=lambda text: None if text == "null" else float(text),
        default=2.0,
        metavar="S",
        help="max_behind_seconds of each stream (null: never skip)",
    )
    args = parser.parse_args()
    if args.slow_decode:
        slow_decoding(pytest.MonkeyPatch(), args.slow_decode)
    with RtspServer() as server:
        for streams in args.streams:
            print(
                measure(
                    server.url(),
                    streams,
                    args.seconds,
                    args.policy,
                    args.slow_model,
                    args.concurrent_runs,
                    args.max_behind,
                )
            )


if __name__ == "__main__":
    main()
