"""Whole processes, start to exit: ``vstream run``, the naive loop, Ultralytics' predict.

Each side is a fresh Python process on the same video and model, timed from
its start to its exit, so imports, model loading and warm-up count as much
as the frames do: what a user waits for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vstream.errors import VstreamError

TIMEOUT_SECONDS = 1800


def _timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Seconds from start to exit of ``command``, and what it printed."""
    started = time.perf_counter()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise VstreamError(f"{' '.join(command[:4])} ... failed: {lines[-1]}")
    return seconds, done.stdout


def _row(seconds: float, frames: int) -> dict[str, Any]:
    return {"frames": frames, "seconds": round(seconds, 3), "fps": round(frames / seconds, 2)}


def compare_processes(
    video: Path, model: Path, imgsz: int, threads: int, run_options: list[str]
) -> dict[str, dict[str, Any]]:
    """fps of each process over the whole video, counted from start to exit.

    ``run_options`` are the batch and thread options of ``vstream run``; the
    naive loop gets the same ONNX Runtime thread count, Ultralytics its own
    defaults (it has no such option).
    """
    python = sys.executable
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="vstream-bench-") as tmp:
        records = Path(tmp) / "records.jsonl"
        seconds, _ = _timed(
            [python, "-m", "vstream", "run", "--source", str(video), "--model", str(model),
             "--imgsz", str(imgsz), *run_options, "--quiet", "--output", str(records)]
        )  # fmt: skip
        with records.open(encoding="utf-8") as lines:
            rows["vstream"] = _row(seconds, sum(1 for _ in lines))
        seconds, out = _timed(
            [python, "-m", "vstream.bench.naive", str(video), str(model),
             "--imgsz", str(imgsz), "--threads", str(threads)]
        )  # fmt: skip
        rows["naive"] = _row(seconds, json.loads(out.splitlines()[-1])["frames"])
        env = dict(os.environ, YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
        seconds, out = _timed(
            [python, "-m", "vstream.bench.ultralytics_predict", str(video), str(model),
             "--imgsz", str(imgsz)],
            env,
        )  # fmt: skip
        rows["ultralytics"] = _row(seconds, json.loads(out.splitlines()[-1])["frames"])
    return rows
