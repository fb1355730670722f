"""The benchmark's figures: ratios, the issue's targets met or not, JSON and a table.

Targets are the project's throughput goals on a CPU, where the model is the
ceiling: the pipeline should hide its other stages behind the model, stay
ahead of a naive loop and of Ultralytics, be fair across streams and keep
its memory flat.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import torch

from vstream.bench.measure import Measurement
from vstream.inference import describe_runtime

STAGES = ("decode", "preprocess", "inference", "postprocess")


@dataclass
class BenchResults:
    """Everything one ``vstream bench`` run measured."""

    config: dict[str, Any]
    stages: dict[str, Measurement]
    end_to_end: dict[int, Measurement]
    naive: Measurement
    peak_rss_bytes: int
    soak: Measurement | None = None
    processes: dict[str, dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def model_fps(self) -> float:
        return self.stages["inference"].fps

    @property
    def single(self) -> Measurement:
        """End to end with the fewest streams (one, unless told otherwise)."""
        return self.end_to_end[min(self.end_to_end)]

    @property
    def most(self) -> Measurement:
        """End to end with the most streams."""
        return self.end_to_end[max(self.end_to_end)]


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model_name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model_name = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu": model_name,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "onnxruntime": describe_runtime(),
        "torch": torch.__version__,
        "pyav": av.__version__,
        "python": platform.python_version(),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def ratios(results: BenchResults) -> dict[str, float | None]:
    single = results.single
    slowest = min(results.stages[s].fps for s in STAGES)
    found = {
        "end_to_end_over_slowest_stage": _ratio(single.fps, slowest),
        "end_to_end_over_model_only": _ratio(single.fps, results.model_fps),
        "end_to_end_over_naive": _ratio(single.fps, results.naive.fps),
        "most_streams_over_model_only": _ratio(results.most.fps, results.model_fps),
        "pipeline_cpu_ms_per_frame_outside_model": round(
            single.cpu_ms_per_frame - results.stages["inference"].cpu_ms_per_frame, 3
        ),
    }
    if results.processes is not None:
        rows = results.processes
        found["process_vstream_over_naive"] = _ratio(rows["vstream"]["fps"], rows["naive"]["fps"])
        found["process_vstream_over_ultralytics"] = _ratio(
            rows["vstream"]["fps"], rows["ultralytics"]["fps"]
        )
    return found


def targets(results: BenchResults) -> list[dict[str, Any]]:
    """The issue's CPU targets that this run measured, each with its value and verdict."""
    found = ratios(results)
    streams = max(results.end_to_end)
    rows = [
        ("end to end >= 0.95x model-only", found["end_to_end_over_model_only"], 0.95, True),
        ("end to end >= 1.05x naive (in process)", found["end_to_end_over_naive"], 1.05, True),
        (
            f"{streams} streams aggregate >= 0.95x model-only",
            found["most_streams_over_model_only"],
            0.95,
            True,
        ),
        (
            f"{streams} streams each within 20% of the mean fps",
            results.most.extra["fairness_max_deviation"],
            0.20,
            False,
        ),
    ]
    if results.processes is not None:
        rows.append(
            (
                "whole process >= 1.05x naive",
                found["process_vstream_over_naive"],
                1.05,
                True,
            )
        )
        rows.append(
            (
                "whole process >= 1.3x Ultralytics (target stated at imgsz 320)",
                found["process_vstream_over_ultralytics"],
                1.3,
                True,
            )
        )
    if results.soak is not None:
        rows.append(
            (
                f"RSS growth after {results.soak.frames} frames <= 50 MB",
                results.soak.extra["rss_growth_mb"],
                50.0,
                False,
            )
        )
    return [
        {
            "target": name,
            "value": value,
            "met": None if value is None else (value >= bound if at_least else value <= bound),
        }
        for name, value, bound, at_least in rows
    ]


def to_json(results: BenchResults) -> dict[str, Any]:
    return {
        "machine": machine(),
        "config": results.config,
        "stages": {name: m.to_dict() for name, m in results.stages.items()},
        "end_to_end": {str(n): m.to_dict() for n, m in results.end_to_end.items()},
        "naive": results.naive.to_dict(),
        "soak": results.soak.to_dict() if results.soak is not None else None,
        "processes": results.processes,
        "ratios": ratios(results),
        "targets": targets(results),
        "peak_rss_mb": round(results.peak_rss_bytes / 2**20, 1),
        "notes": notes(results),
    }


def _latency(m: Measurement) -> str:
    latency = m.latency_ms()
    if latency is None:
        return ""
    return f"{latency['p50']:7.1f} {latency['p95']:7.1f} {latency['p99']:7.1f}"


def render(results: BenchResults) -> str:
    """The figures as a table for a terminal."""
    config = results.config
    lines = [
        f"model {config['model']} at {config['imgsz']}, batch {config['batch']}, "
        f"ORT threads {config['threads'] or 'default'}, device {config['device']}",
        f"video {config['source']}, {config['frames']} frames per run",
        "",
        f"{'run':<26}{'frames':>7}{'fps':>9}{'CPU ms/f':>10}  latency ms p50/p95/p99",
    ]
    rows: list[tuple[str, Measurement]] = [(f"{s} only", results.stages[s]) for s in STAGES]
    rows += [(f"end to end, {n} stream(s)", m) for n, m in results.end_to_end.items()]
    rows.append((f"naive ({results.naive.extra['decoder']})", results.naive))
    if results.soak is not None:
        rows.append(("soak, 1 stream", results.soak))
    for name, m in rows:
        lines.append(
            f"{name:<26}{m.frames:>7}{m.fps:>9.1f}{m.cpu_ms_per_frame:>10.2f}  {_latency(m)}"
        )
    lines.append("")
    for n, m in results.end_to_end.items():
        per_stream = ", ".join(f"{v:.1f}" for v in m.extra["per_stream_fps"].values())
        lines.append(
            f"{n} stream(s): per-stream fps {per_stream}; "
            f"max deviation {100 * m.extra['fairness_max_deviation']:.1f}%; "
            f"{m.extra['device_bytes_per_frame']:.0f} bytes/frame to the host"
        )
    lines.append(
        f"naive: {results.naive.extra['device_bytes_per_frame']} bytes/frame through "
        "session.run (input + output arrays)"
    )
    if results.processes is not None:
        lines.append("")
        lines.append("whole processes, start to exit:")
        for name, row in results.processes.items():
            lines.append(
                f"  {name:<12}{row['frames']:>6} frames {row['seconds']:>8.2f} s "
                f"{row['fps']:>8.1f} fps"
            )
    lines.append("")
    for name, value in ratios(results).items():
        lines.append(f"{name.replace('_', ' ')}: {value}")
    if results.soak is not None:
        lines.append(f"soak RSS MB: {results.soak.extra['rss_mb_after_frames']}")
    lines.append(f"peak RSS: {results.peak_rss_bytes / 2**20:.0f} MB")
    lines.append("")
    for target in targets(results):
        verdict = {True: "met", False: "NOT met", None: "not measured"}[target["met"]]
        lines.append(f"target: {target['target']}: {target['value']} -> {verdict}")
    lines.extend(f"note: {note}" for note in notes(results))
    return "\n".join(lines)


BUSY_NEIGHBOUR_CORES = 0.1
"""Other processes using more than this many cores during a run make its figures suspect."""


def notes(results: BenchResults) -> list[str]:
    """The run's own notes, plus a warning for every run a busy neighbour disturbed."""
    found = list(results.notes)
    runs = {f"{s} only": m for s, m in results.stages.items()}
    runs |= {f"end to end, {n} stream(s)": m for n, m in results.end_to_end.items()}
    runs["naive"] = results.naive
    if results.soak is not None:
        runs["soak"] = results.soak
    for name, m in runs.items():
        others = m.others_cores
        if others is not None and others > BUSY_NEIGHBOUR_CORES:
            found.append(f"{name}: other processes used {others:.2f} cores meanwhile")
    return found
