"""How long a picture waits in the decoder, live (``low_delay``) against files, and what it costs.

A live picture's age counts from when its packet was read (``Picture.packet``),
so whatever the decoder holds back is latency a viewer sees. For each decoder
(``cpu``; ``nvdec`` where a GPU has it) and each way of decoding (``file``: as a
file is decoded; ``live``: as a camera is), every picture of a 1080p H.264 clip
is decoded, once without B-frames (as most cameras send) and once with them:

- **lag**: packets read after a picture's own before the picture came out (its
  own found by its time stamp in PyAV's reading order); at a camera's 30
  frames/s each packet is 33 ms. Pictures handed out by the end of the stream
  are left out (nothing more was coming).
- **frames/s**: ``--sessions`` decoders at once, a thread each (NVDEC: a CUDA
  stream each), decoding the clip without B-frames as fast as they can.

    .venv/bin/python benchmarks/decoder_delay.py [--decoders cpu nvdec] [--frames 90]
        [--sessions 1 8]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from decode import make_video

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import decoding_lags  # noqa: E402

from vstream.decoders.cpu import PyAVDecoder  # noqa: E402

FPS = 30


def opener(kind: str, low_delay: bool) -> Callable[[Path, int | None], object]:
    """Opens a clip with decoder ``kind`` (on a CUDA stream handle for NVDEC)."""
    if kind == "cpu":
        return lambda path, _stream: PyAVDecoder(
            str(path), device=torch.device("cpu"), low_delay=low_delay
        )
    from vstream.decoders.nvdec import NvdecDecoder

    return lambda path, stream: NvdecDecoder(
        str(path), device=torch.device("cuda"), cuda_stream=stream, cache=None, low_delay=low_delay
    )


def lags(open_clip: Callable[[Path, int | None], object], path: Path) -> list[int]:
    """Each picture's lag in packets, but for those handed out by the end of the stream."""
    stream = torch.cuda.Stream() if torch.cuda.is_available() else None
    return decoding_lags(open_clip(path, None if stream is None else stream.cuda_stream), path)


def throughput(open_clip: Callable[[Path, int | None], object], path: Path, sessions: int) -> float:
    """Frames/s of ``sessions`` decoders at once, a thread (and a CUDA stream) each."""
    counts = [0] * sessions
    start = threading.Barrier(sessions + 1)

    def run(k: int) -> None:
        stream = torch.cuda.Stream() if torch.cuda.is_available() else None
        decoder = open_clip(path, None if stream is None else stream.cuda_stream)
        start.wait()
        try:
            counts[k] = sum(1 for _ in decoder.pictures())  # type: ignore[attr-defined]
            if stream is not None:
                stream.synchronize()
        finally:
            decoder.close()  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(sessions)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decoders", nargs="+", default=["cpu", "nvdec"])
    parser.add_argument("--frames", type=int, default=90)
    parser.add_argument("--size", nargs=2, type=int, default=[1920, 1080], metavar=("W", "H"))
    parser.add_argument("--sessions", nargs="+", type=int, default=[1, 8])
    args = parser.parse_args()
    kinds = list(args.decoders)
    if "nvdec" in kinds:
        from vstream.decoders import nvdec_status

        works, why = (
            nvdec_status("cuda") if torch.cuda.is_available() else (False, "torch sees no GPU")
        )
        if not works:
            print(f"nvdec left out: {why}")
            kinds.remove("nvdec")
    width, height = args.size
    print(
        f"| decoder | input | B-frames | lag median (max), packets | at {FPS} fps, ms | "
        + " | ".join(f"frames/s, {s} at once" for s in args.sessions)
        + " |"
    )
    print("|---|---|---|---:|---:|" + "---:|" * len(args.sessions))
    with tempfile.TemporaryDirectory() as tmp:
        clips = {
            "none": make_video(Path(tmp) / "camera.mp4", width, height, args.frames, FPS, 0),
            "x264's": make_video(Path(tmp) / "b.mp4", width, height, args.frames, FPS),
        }
        for kind, (mode, low_delay) in itertools.product(kinds, [("file", False), ("live", True)]):
            open_clip = opener(kind, low_delay)
            rates = [throughput(open_clip, clips["none"], s) for s in args.sessions]
            for b_frames, path in clips.items():
                waited = lags(open_clip, path)
                median = statistics.median(waited) if waited else float("nan")
                rate = " | ".join(f"{r:.1f}" if b_frames == "none" else "" for r in rates)
                print(
                    f"| {kind} | {mode} | {b_frames} | {median:g} ({max(waited, default=0)}) | "
                    f"{median * 1000 / FPS:.0f} | {rate} |"
                )


if __name__ == "__main__":
    main()
