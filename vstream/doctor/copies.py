"""``copies-gpu``: what crossed between host and device and where the host waited, per the profiler.

The zero-copy check proves where ONNX Runtime reads and writes; this one
proves that nothing else moves frames around it. torch's profiler (CUPTI)
sees every copy and every blocking CUDA runtime call of the NVDEC pipeline,
and torch's sync debug mode every implicit wait: the host must receive no
more than the detections, and wait once per model run plus the waits
vstream itself counts.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

from vstream.doctor.harness import BindingSpy, detect_records, video_size
from vstream.doctor.report import Failed, Skipped

DETECTION_BYTES = 7 * 4
"""Bytes of one detection row handed to the host: frame, x1, y1, x2, y2, score, class (float32)."""
SYNC_SLACK_BYTES = 64
"""Device-to-host bytes per batch allowed beyond the detections (counts read by NMS)."""
HOST_WAIT_CALLS = ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize")
"""CUDA runtime calls in which the host waits for the device, as the profiler names them."""
SYNC_WARNING = "synchronizing CUDA operation"
"""The words of torch's sync debug mode's warning (``warn_or_error_on_sync``)."""
WINDOW = "vstream.doctor.detect"
"""The profiler range around the pipeline's run: the profiler's own ``cudaDeviceSynchronize``
calls, as it starts and stops, fall outside it (two of them, on an H100)."""


def _inside(events: list[dict[str, Any]], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runtime ``calls`` made while the pipeline ran (all of them where no range was traced)."""
    ranges = [e for e in events if e.get("name") == WINDOW and "dur" in e]
    if not ranges:
        return calls
    start = min(float(e["ts"]) for e in ranges)
    end = max(float(e["ts"]) + float(e["dur"]) for e in ranges)
    return [e for e in calls if start <= float(e.get("ts", start)) <= end]


def count_copies(detector: Any, video: Path, frames: int) -> tuple[str, dict[str, Any]]:
    """Profile the NVDEC pipeline and count, from the profiler's trace, what crossed and waited.

    Copies and their bytes are CUPTI's (``gpu_memcpy`` events); host waits are
    the CUDA runtime calls that block (:data:`HOST_WAIT_CALLS`); implicit
    waits are torch's sync debug mode's warnings; model runs are counted at
    ONNX Runtime's entry point; the bytes the host needed are those of the
    detections it received.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from vstream.transfer import transfers

    detect_records(detector, video, 8, decoder="nvdec")  # warm: the first batches allocate and plan
    width, height = video_size(video)
    frame_bytes = width * height * 3 // 2
    counted_before = transfers.implicit_sync_total()
    boundary_before, _ = transfers.snapshot()
    with tempfile.TemporaryDirectory() as folder, BindingSpy(detector.model) as spy:
        trace = Path(folder) / "trace.json"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
                with profile(activities=activities) as prof, record_function(WINDOW):
                    records = detect_records(
                        detector, video, frames, decoder="nvdec", settled=False
                    )
            finally:
                torch.cuda.set_sync_debug_mode("default")
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    # Only torch's sync warnings: the profiler warns too ("Profiler clears events ...").
    syncs = [w for w in caught if SYNC_WARNING in str(w.message)]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    runtime = _inside(events, [e for e in events if e.get("cat") == "cuda_runtime"])
    if not copies or not runtime:
        raise Skipped("the profiler recorded no CUDA copies or runtime calls (CUPTI unavailable?)")
    if any(r["decoder"] != "nvdec" for r in records):
        raise Failed("frames did not come from NVDEC")

    def size(event: dict[str, Any]) -> int:
        return int(event.get("args", {}).get("bytes", 0))

    waits = {name: sum(e.get("name") == name for e in runtime) for name in HOST_WAIT_CALLS}
    to_host = [e for e in copies if "DtoH" in e.get("name", "")]
    to_device = [e for e in copies if "HtoD" in e.get("name", "")]
    frame_sized = [e for e in to_host + to_device if size(e) >= frame_bytes]
    count = max(1, len(records))
    boundary_bytes = transfers.snapshot()[0] - boundary_before
    detections = sum(len(r["detections"]) for r in records) * DETECTION_BYTES
    data = {
        "frames": len(records),
        "frame_bytes": frame_bytes,
        "dtoh_copies": len(to_host),
        "dtoh_bytes_per_frame": round(sum(map(size, to_host)) / count, 1),
        "htod_copies": len(to_device),
        "htod_bytes_per_frame": round(sum(map(size, to_device)) / count, 1),
        "dtod_copies": sum("DtoD" in e.get("name", "") for e in copies),
        "detection_bytes_per_frame": round(detections / count, 1),
        "boundary_bytes_per_frame": round(boundary_bytes / count, 1),
        "model_runs": spy.runs,
        "host_waits": waits,
        "implicit_syncs": len(syncs),
        "implicit_syncs_counted": transfers.implicit_sync_total() - counted_before,
    }
    problems = []
    if len(syncs) > data["implicit_syncs_counted"]:
        problems.append(
            f"torch saw {len(syncs)} implicit host waits, vstream counts "
            f"{data['implicit_syncs_counted']}: one in the hot path is not accounted for "
            f"({str(syncs[0].message).strip().splitlines()[0]})"
        )
    if frame_sized:
        problems.append(
            f"{len(frame_sized)} frame-sized copies between host and device "
            f"({frame_sized[0].get('name')}, {size(frame_sized[0])} bytes)"
        )
    # Everything that reaches the host crosses at the device boundary (vstream.transfer):
    # the detections, in the fixed shapes the sync-free postprocess copies on CUDA.
    if sum(map(size, to_host)) > boundary_bytes + SYNC_SLACK_BYTES * max(1, spy.runs):
        problems.append(
            f"{data['dtoh_bytes_per_frame']} bytes per frame to the host; the device boundary "
            f"handed over {data['boundary_bytes_per_frame']} (detections "
            f"{data['detection_bytes_per_frame']})"
        )
    if waits["cudaEventSynchronize"] != spy.runs or waits["cudaDeviceSynchronize"]:
        problems.append(f"host waits {waits} for {spy.runs} model runs (one event wait each)")
    if waits["cudaStreamSynchronize"] > len(syncs):
        problems.append(
            f"{waits['cudaStreamSynchronize']} stream synchronisations, {len(syncs)} of them "
            "implicit waits torch reports"
        )
    if problems:
        raise Failed("; ".join(problems))
    return (
        f"{len(records)} NVDEC frames: no frame-sized copy; "
        f"{data['dtoh_bytes_per_frame']:.0f} B/frame to host (detections "
        f"{data['detection_bytes_per_frame']:.0f}), {waits['cudaEventSynchronize']} event waits "
        f"for {spy.runs} model runs, {len(syncs)} implicit syncs, each counted where it is made"
    ), data
