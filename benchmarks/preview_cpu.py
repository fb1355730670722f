"""The extra CPU a watched live preview costs: ms of CPU per second of watching.

A delivery thread offers a 640x360 annotated frame (pre-made: annotation is
not the preview's cost) to a :class:`vstream.server.preview.PreviewHub`
25 times a second, served by uvicorn with the dashboard routes. The process's
CPU time (every thread: offering, JPEG encoding, HTTP) is measured over the
same span without a viewer and then with one ``curl`` reading
``preview.mjpg`` (in its own process, not counted). The difference is the
preview's cost.

    .venv/bin/python benchmarks/preview_cpu.py [--seconds 20] [--width 640 --height 360]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import threading
import time

import torch

from vstream.clips.jpeg import encode_jpeg
from vstream.server.dashboard import dashboard_router
from vstream.server.http import ApiServer
from vstream.server.preview import PreviewHub


def frames(width: int, height: int, count: int = 50) -> list[torch.Tensor]:
    out = []
    for i in range(count):
        frame = torch.zeros((height, width, 3), dtype=torch.uint8)
        frame[..., 2] = (torch.arange(width) * 255 // width).to(torch.uint8)
        frame[..., 1] = (torch.arange(height) * 255 // height).to(torch.uint8)[:, None]
        x = (i * 13) % (width - 40)
        frame[:, x : x + 40, 0] = 255
        out.append(frame)
    return out


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--source-fps", type=float, default=25.0)
    parser.add_argument("--max-fps", type=float, default=5.0)
    parser.add_argument("--max-width", type=int, default=640)
    args = parser.parse_args()

    pictures = frames(args.width, args.height)
    started = time.perf_counter()
    for picture in pictures * 2:
        encode_jpeg(picture, 75, args.max_width)
    per_encode = (time.perf_counter() - started) / (2 * len(pictures))

    from fastapi import FastAPI

    hub = PreviewHub(max_fps=args.max_fps, max_width=args.max_width)
    app = FastAPI()
    app.include_router(dashboard_router(hub, None, None))
    server = ApiServer(app, "127.0.0.1", 0)
    server.start()
    stop = threading.Event()

    def deliver() -> None:
        i = 0
        period = 1.0 / args.source_fps
        next_at = time.monotonic()
        while not stop.is_set():
            hub.offer("cam", pictures[i % len(pictures)])
            i += 1
            next_at += period
            stop.wait(max(0.0, next_at - time.monotonic()))

    thread = threading.Thread(target=deliver, daemon=True)
    thread.start()
    time.sleep(1.0)

    def span(watch: bool) -> tuple[float, int, int]:
        client = None
        if watch:
            client = subprocess.Popen(
                ["curl", "-s", "-N", "-o", "/dev/null", f"{server.url}/streams/cam/preview.mjpg"]
            )
            deadline = time.monotonic() + 10
            while not hub.watched("cam") and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
        stats = hub.stats().get("cam", {"encodes": 0})
        encodes = stats["encodes"]
        cpu, wall = cpu_seconds(), time.perf_counter()
        time.sleep(args.seconds)
        cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
        encoded = hub.stats().get("cam", {"encodes": 0})["encodes"] - encodes
        if client is not None:
            client.terminate()
            client.wait(10)
        return cpu / wall * 1000, encoded, round(wall)

    idle, _, seconds = span(watch=False)
    watched, encoded, _ = span(watch=True)
    stop.set()
    thread.join(5)
    server.stop()
    hub.close()
    print(
        f"source {args.width}x{args.height} at {args.source_fps:g} fps, preview at most "
        f"{args.max_fps:g} fps and {args.max_width} px wide, {seconds} s each"
    )
    print(f"JPEG encode: {per_encode * 1000:.2f} ms per frame")
    print(f"unwatched: {idle:.1f} ms CPU per second (delivery thread, idle server)")
    print(f"watched by one client: {watched:.1f} ms CPU per second ({encoded / seconds:.1f} fps)")
    print(f"extra CPU of one watched preview: {watched - idle:.1f} ms per second")


if __name__ == "__main__":
    main()
