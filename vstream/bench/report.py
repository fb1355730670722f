"""The benchmark's figures: ratios, every target of the throughput issue met or not, JSON, a table.

The targets (issue 9, "CPU throughput") are ratios measured side by side in
one run, so they hold on any machine: the whole process against a naive
loop and against Ultralytics, the pipeline in process against the model
alone as users measure it (one and four streams, fairly shared), start-up
against importing torch, and memory that stays flat. A target the run did
not measure is reported as such, never guessed.
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

FOUR_STREAMS = 4
"""The stream count the multi-stream targets are stated for."""

WHOLE_PROCESS_VIDEO = "a 720p H.264 video of at least 1,000 frames"


@dataclass
class BenchResults:
    """Everything one ``vstream bench`` run measured."""

    config: dict[str, Any]
    stages: dict[str, Measurement]
    model_alone: Measurement
    """The model as users measure it: default session, batch 1, run after run."""
    end_to_end: dict[int, Measurement]
    naive: Measurement | None
    """None where the naive loop cannot run the model (:func:`~vstream.bench.naive.unfit`)."""
    peak_rss_bytes: int
    soak: Measurement | None = None
    processes: dict[int, dict[str, dict[str, Any]]] | None = None
    """Whole processes per imgsz: ``vstream``, ``naive`` and ``ultralytics`` rows."""
    startup: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def single(self) -> Measurement | None:
        """End to end with one stream, what the in-process targets are stated for; None
        where ``--streams`` left it out (another count's figures would be another measure)."""
        return self.end_to_end.get(1)


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


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _fps(run: Measurement | None) -> float | None:
    return run.fps if run is not None else None


def _process_fps(results: BenchResults, imgsz: int, side: str) -> float | None:
    row = (results.processes or {}).get(imgsz, {}).get(side)
    return row["fps"] if row is not None else None


def ratios(results: BenchResults) -> dict[str, float | None]:
    single, alone, inference = results.single, results.model_alone.fps, results.stages["inference"]
    found: dict[str, float | None] = {
        "end_to_end_over_model_alone": _ratio(_fps(single), alone),
        "end_to_end_over_naive": _ratio(_fps(single), _fps(results.naive)),
        "end_to_end_over_model_in_the_pipeline_plan": _ratio(_fps(single), inference.fps),
        "pipeline_cpu_ms_per_frame_outside_model": round(
            single.cpu_ms_per_frame - inference.cpu_ms_per_frame, 3
        )
        if single is not None
        else None,
    }
    for streams, run in results.end_to_end.items():
        if streams > 1:
            found[f"{streams}_streams_aggregate_over_model_alone"] = _ratio(run.fps, alone)
    for imgsz in sorted(results.processes or {}):
        vstream_fps = _process_fps(results, imgsz, "vstream")
        found[f"process_{imgsz}_vstream_over_naive"] = _ratio(
            vstream_fps, _process_fps(results, imgsz, "naive")
        )
        found[f"process_{imgsz}_vstream_over_ultralytics"] = _ratio(
            vstream_fps, _process_fps(results, imgsz, "ultralytics")
        )
    return found


def targets(results: BenchResults) -> list[dict[str, Any]]:
    """Every target of the issue, each with its measured value and verdict (None: not measured)."""
    found = ratios(results)
    four = results.end_to_end.get(FOUR_STREAMS)
    startup = (results.startup or {}).get("over_import_torch", {})
    rows: list[tuple[str, float | None, float, bool]] = [
        (
            "whole process, imgsz 320: >= 1.6x Ultralytics streaming predict",
            found.get("process_320_vstream_over_ultralytics"),
            1.6,
            True,
        ),
        (
            "whole process, imgsz 320: >= 1.25x the naive loop",
            found.get("process_320_vstream_over_naive"),
            1.25,
            True,
        ),
        (
            "whole process, imgsz 640: >= 1.2x the naive loop",
            found.get("process_640_vstream_over_naive"),
            1.2,
            True,
        ),
        (
            "in process, end to end, 1 stream: >= 1.0x the model alone",
            found["end_to_end_over_model_alone"],
            1.0,
            True,
        ),
        (
            "4 streams: aggregate >= 1.0x the model alone",
            _ratio(four.fps, results.model_alone.fps) if four is not None else None,
            1.0,
            True,
        ),
        (
            "4 streams: each within 20 % of the mean",
            four.extra["fairness_max_deviation"] if four is not None else None,
            0.20,
            False,
        ),
    ]
    for command in ("vstream --help", "vstream schema", "vstream validate"):
        rows.append(
            (f"{command}: <= 0.3x the wall time of import torch", startup.get(command), 0.3, False)
        )
    soak = results.soak
    rows.append(
        (
            f"RSS after {soak.frames if soak else 20_000} frames within 50 MB of RSS after "
            f"{min(1000, soak.frames) if soak else 1000}",
            abs(soak.extra["rss_growth_mb"])
            if soak is not None and soak.extra["rss_growth_mb"] is not None
            else None,
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
        "model_alone": results.model_alone.to_dict(),
        "end_to_end": {str(n): m.to_dict() for n, m in results.end_to_end.items()},
        "naive": results.naive.to_dict() if results.naive is not None else None,
        "soak": results.soak.to_dict() if results.soak is not None else None,
        "processes": {str(k): v for k, v in results.processes.items()}
        if results.processes is not None
        else None,
        "startup": results.startup,
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
        f"model {config['model']} at {config['imgsz']}, plan {config['plan']}, "
        f"batch {config['batch']}, device {config['device']}",
        f"video {config['source']} ({config['video']}), {config['frames']} frames per run",
        "",
        f"{'run':<30}{'frames':>7}{'fps':>9}{'CPU ms/f':>10}  latency ms p50/p95/p99",
    ]
    rows: list[tuple[str, Measurement]] = [(f"{s} only", results.stages[s]) for s in STAGES]
    rows.append(("model alone (users' measure)", results.model_alone))
    rows += [(f"end to end, {n} stream(s)", m) for n, m in results.end_to_end.items()]
    if results.naive is not None:
        rows.append((f"naive ({results.naive.extra['decoder']})", results.naive))
    if results.soak is not None:
        rows.append(("soak, 1 stream", results.soak))
    for name, m in rows:
        lines.append(
            f"{name:<30}{m.frames:>7}{m.fps:>9.1f}{m.cpu_ms_per_frame:>10.2f}  {_latency(m)}"
        )
    lines.append("")
    for n, m in results.end_to_end.items():
        per_stream = ", ".join(f"{v:.1f}" for v in m.extra["per_stream_fps"].values())
        lines.append(
            f"{n} stream(s): per-stream fps {per_stream}; "
            f"max deviation {100 * m.extra['fairness_max_deviation']:.1f}%; "
            f"{m.extra['device_bytes_per_frame']:.0f} bytes/frame to the host"
        )
    if results.naive is not None:
        lines.append(
            f"naive: {results.naive.extra['device_bytes_per_frame']} bytes/frame through "
            "session.run (input + output arrays)"
        )
    for imgsz, rows_ in sorted((results.processes or {}).items()):
        lines.append("")
        lines.append(f"whole processes, start to exit, imgsz {imgsz}:")
        for name, row in rows_.items():
            others = row["other_processes_cores"]
            lines.append(
                f"  {name:<12}{row['frames']:>6} frames {row['seconds']:>8.2f} s "
                f"{row['fps']:>8.1f} fps  CPU {row['cpu_seconds']:>7.1f} s  "
                f"peak RSS {row['peak_rss_mb'] or 0:>7.1f} MB"
                + (f"  (others used {others:.2f} cores)" if others is not None else "")
            )
    if results.startup is not None:
        lines.append("")
        lines.append(f"start-up, median of {results.startup['repeats']} runs:")
        for name, seconds in results.startup["seconds"].items():
            ratio = results.startup["over_import_torch"].get(name)
            shown = f" = {ratio}x import torch" if ratio is not None else ""
            lines.append(f"  {name:<18}{seconds:>7.3f} s{shown}")
    lines.append("")
    for name, value in ratios(results).items():
        lines.append(f"{name.replace('_', ' ')}: {'not measured' if value is None else value}")
    if results.soak is not None:
        lines.append(f"soak RSS MB: {results.soak.extra['rss_mb_after_frames']}")
    lines.append(f"peak RSS of the bench process: {results.peak_rss_bytes / 2**20:.0f} MB")
    lines.append("")
    unmeasured = 0
    for target in targets(results):
        if target["met"] is None:
            unmeasured += 1  # one line for all: a short run measures few of them
            continue
        verdict = "met" if target["met"] else "NOT met"
        lines.append(f"target: {target['target']}: {target['value']} -> {verdict}")
    if unmeasured:
        lines.append(f"targets not measured in this run: {unmeasured} (--full measures all)")
    lines.extend(f"note: {note}" for note in notes(results))
    return "\n".join(lines)


BUSY_NEIGHBOUR_CORES = 0.1
"""Other processes using more than this many cores during a run make its figures suspect."""


def notes(results: BenchResults) -> list[str]:
    """The run's own notes, plus a warning for every run a busy neighbour disturbed."""
    found = list(results.notes)
    runs = {f"{s} only": m for s, m in results.stages.items()}
    runs["model alone"] = results.model_alone
    runs |= {f"end to end, {n} stream(s)": m for n, m in results.end_to_end.items()}
    if results.naive is not None:
        runs["naive"] = results.naive
    if results.soak is not None:
        runs["soak"] = results.soak
    for name, m in runs.items():
        others = m.others_cores
        if others is not None and others > BUSY_NEIGHBOUR_CORES:
            found.append(f"{name}: other processes used {others:.2f} cores meanwhile")
    for imgsz, rows in sorted((results.processes or {}).items()):
        for side, row in rows.items():
            others = row["other_processes_cores"]
            if others is not None and others > BUSY_NEIGHBOUR_CORES:
                found.append(
                    f"whole process {side} at {imgsz}: other processes used {others:.2f} cores"
                )
    return found
