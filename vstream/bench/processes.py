"""Whole processes, start to exit: ``vstream run``, the naive loop, Ultralytics' predict.

Each side is a fresh Python process on the same video and model, timed from
its start to its exit, so imports, model loading and warm-up count as much
as the frames do: what a user waits for. Each process's own peak resident
memory is read from ``/proc`` while it runs and its CPU time from the kernel
when it exits (``wait4``); the CPU other processes used meanwhile is
reported beside it, so a run disturbed by a busy neighbour shows.
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

from vstream.bench.measure import machine_busy_seconds
from vstream.errors import VstreamError

TIMEOUT_SECONDS = 1800


def _peak_rss_kib(pid: int) -> int:
    """The high-water mark of a running process's resident memory (``VmHWM``), 0 if unknown.

    Read from ``/proc`` while the process runs, because what ``wait4``
    reports at its exit (``ru_maxrss``) keeps the parent's resident memory
    from before ``exec``: the bench's own hundreds of megabytes.
    """
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _timed(command: list[str], workdir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``command`` to its end: wall seconds, CPU, peak RSS, others' CPU and its stdout."""
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    busy_before = machine_busy_seconds()
    with out_path.open("w") as out, err_path.open("w") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        deadline = started + TIMEOUT_SECONDS
        peak_kib = 0
        while True:
            peak_kib = max(peak_kib, _peak_rss_kib(process.pid))
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                process.wait()
                raise VstreamError(f"{' '.join(command[1:4])} ... took over {TIMEOUT_SECONDS} s")
            time.sleep(0.02)
        seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped: keep Popen from waiting
    busy_after = machine_busy_seconds()
    stdout = out_path.read_text()
    if process.returncode != 0:
        lines = (err_path.read_text() or stdout).strip().splitlines() or ["(no output)"]
        raise VstreamError(f"{' '.join(command[1:4])} ... failed: {lines[-1]}")
    cpu = usage.ru_utime + usage.ru_stime
    others = None
    if busy_before is not None and busy_after is not None and seconds > 0:
        others = round(max(0.0, (busy_after - busy_before - cpu) / seconds), 3)
    return {
        "seconds": seconds,
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(peak_kib / 1024, 1) if peak_kib else None,
        "other_processes_cores": others,
        "stdout": stdout,
    }


def _row(measured: dict[str, Any], frames: int) -> dict[str, Any]:
    seconds = measured["seconds"]
    return {
        "frames": frames,
        "seconds": round(seconds, 3),
        "fps": round(frames / seconds, 2),
        "cpu_seconds": measured["cpu_seconds"],
        "peak_rss_mb": measured["peak_rss_mb"],
        "other_processes_cores": measured["other_processes_cores"],
    }


def compare_processes(
    video: Path,
    model: Path,
    imgsz: int,
    run_options: list[str],
    *,
    naive: bool = True,
    ultralytics: bool,
) -> dict[str, dict[str, Any]]:
    """fps, CPU and peak memory of each process over the whole video, start to exit.

    ``run_options`` are the flags of ``vstream run`` the bench was given (its
    plan is otherwise automatic, as a user gets it). The naive loop makes its
    session as people usually do (ONNX Runtime's default threads), and
    Ultralytics uses its own defaults (it has no such option). ``naive``: False for a model
    the naive loop cannot run (:func:`~vstream.bench.naive.unfit`), whose row is left out.
    """
    python = sys.executable
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="vstream-bench-") as tmp:
        workdir = Path(tmp)
        records = workdir / "records.jsonl"
        measured = _timed(
            [python, "-m", "vstream", "run", "--source", str(video), "--model", str(model),
             "--imgsz", str(imgsz), *run_options, "--quiet", "--output", str(records)],
            workdir,
        )  # fmt: skip
        with records.open(encoding="utf-8") as lines:
            rows["vstream"] = _row(measured, sum(1 for _ in lines))
        if naive:
            naive_loop = [python, "-m", "vstream.bench.naive", str(video), str(model)]
            measured = _timed([*naive_loop, "--imgsz", str(imgsz)], workdir)
            frames = json.loads(measured["stdout"].splitlines()[-1])["frames"]
            rows["naive"] = _row(measured, frames)
        if ultralytics:
            env = dict(os.environ, YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
            measured = _timed(
                [python, "-m", "vstream.bench.ultralytics_predict", str(video), str(model),
                 "--imgsz", str(imgsz)],
                workdir,
                env,
            )  # fmt: skip
            frames = json.loads(measured["stdout"].splitlines()[-1])["frames"]
            rows["ultralytics"] = _row(measured, frames)
    return rows
