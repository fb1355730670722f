"""How long a picture waits in the decoder, live (``low_delay``) against files, and what it costs.

A live picture's age counts from when its packet was read (``Picture.packet_time``),
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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import torch
from decode import make_video

from vstream.decoders.cpu import PyAVDecoder

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


def read_order(path: Path) -> dict[float, int]:
    """Each packet's place in PyAV's reading order (from 1), by its time in seconds."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [p for p in container.demux(stream) if p.size]
        return {float(p.pts * p.time_base): i for i, p in enumerate(packets, start=1)}


def lags(open_clip: Callable[[Path, int | None], object], path: Path) -> list[int]:
    """Each picture's lag in packets, but for those handed out by the end of the stream."""
    place = read_order(path)
    stream = torch.cuda.Stream() if torch.cuda.is_available() else None
    decoder: Any = open_clip(path, None if stream is None else stream.cuda_stream)
    reads = 0
    packets = decoder.demuxer.packets

    def counted() -> Iterator[av.Packet]:
        nonlocal reads
        for packet in packets():
            reads += packet.size > 0
            yield packet

    decoder.demuxer.packets = counted
    out = []
    try:
        for picture in decoder.pictures():
            if reads < len(place):
                out.append(reads - place[picture.pts_seconds])
    finally:
        decoder.close()
    return out


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
