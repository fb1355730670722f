"""``zero-copy-cpu`` and ``zero-copy-gpu``: ONNX Runtime reads and writes vstream's own tensors.

The claim vstream rests on is that nothing is copied between the letterbox
and the model, nor between the model and postprocessing. ONNX Runtime
reports no input address, so the input side is proved by what it computes
(:func:`bound_input_problems`); the output side by the addresses it reports
after every run (:class:`~vstream.doctor.harness.BindingSpy`). On CUDA,
every decoded frame must also lie in torch's caching allocator: a frame
left in a decoder's surface would be a copy waiting to happen.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from vstream.doctor.harness import BindingSpy, detect_records, open_video
from vstream.doctor.report import Failed

INPUT_TOLERANCE = {"rtol": 1e-3, "atol": 1e-2}
"""How close a bound run and a run fed a copy of its input must be (CUDA kernels may differ)."""


def zero_copy(
    detector: Any, video: Path, frames: int, *, decoder: str = "auto"
) -> tuple[str, dict[str, Any]]:
    """ORT reads the letterbox's tensor and writes where postprocessing reads, by ORT's evidence.

    Inputs: ONNX Runtime reports no input address (``IOBinding`` has no
    ``get_inputs``), so the proof is what it computes: see
    :func:`bound_input_problems`. Outputs: the addresses ORT reports after
    every run of the overlapped engine are the tensors postprocessing reads.
    On CUDA, every frame preprocessing got lies in torch's allocator's memory.
    """
    import torch

    from vstream.devices import same_device

    model = detector.model
    problems = bound_input_problems(detector, video, decoder)
    seen_frames: list[torch.Tensor] = []
    preprocess = detector.preprocess

    def recording(buffer: int, slot: int, frame: Any) -> Any:
        seen_frames.append(frame.data)
        return preprocess(buffer, slot, frame)

    detector.preprocess = recording
    try:
        with BindingSpy(model) as spy:
            records = detect_records(detector, video, frames, decoder=decoder)
    finally:
        del detector.preprocess
    for buffer in model.buffers:
        for bucket in buffer.buckets:
            reported = spy.outputs.get(id(bucket))
            if reported is None:
                continue
            expected = tuple(t.data_ptr() for t in bucket.outputs)
            if reported != {expected}:
                problems.append(
                    f"bucket {bucket.size}: ORT reports outputs at {len(reported)} address sets, "
                    "not the tensors postprocessing reads"
                )
    off_device = [t for t in seen_frames if not same_device(t.device, detector.device)]
    if off_device:
        problems.append(f"{len(off_device)} frames reached preprocessing off {detector.device}")
    if detector.device.type == "cuda":
        segments = _torch_segments(detector.device)
        foreign = [t for t in seen_frames if not _inside(t.data_ptr(), segments)]
        if foreign:
            problems.append(
                f"{len(foreign)} frames lie outside torch's CUDA allocator (a decoder's surface?)"
            )
    data = {
        "frames": len(records),
        "decoder": records[0]["decoder"] if records else None,
        "model_runs": spy.runs,
        "output_addresses_reported_by_ort": sorted(
            {hex(p) for addresses in spy.outputs.values() for ptrs in addresses for p in ptrs}
        ),
    }
    if problems:
        raise Failed("; ".join(problems))
    buckets = len(model.buffers) * len(model.bucket_sizes)
    where = " inside torch's CUDA allocator" if detector.device.type == "cuda" else ""
    return (
        f"{len(records)} frames{where}, {spy.runs} runs: ORT computes on what the letterbox "
        f"wrote ({buckets} bindings) and reports its outputs at the tensors postprocessing reads"
    ), data


def bound_input_problems(detector: Any, video: Path, decoder: str) -> list[str]:
    """What shows that a binding does not read the memory the letterbox writes.

    For each bucket of each buffer, frames are letterboxed into the
    letterboxer's tensor and the bucket run as the engine runs it; ONNX
    Runtime is then fed a host copy of that tensor (``session.run``): the
    outputs must agree. Twice, with the frames in other slots, so a binding
    to a stale copy or to other memory cannot agree both times.
    """
    import numpy as np

    model = detector.model
    name = model.spec.input.name
    with open_video(video, detector.device, decoder=decoder, stream=detector.cuda_stream) as source:
        pictures = list(itertools.islice(source, 40))[::10]
    problems: list[str] = []
    for index, (buffer, letterboxer) in enumerate(
        zip(model.buffers, detector.letterboxers, strict=True)
    ):
        for bucket in buffer.buckets:
            for shift in (0, 1):
                for slot in range(bucket.size):
                    letterboxer.load(slot, pictures[(slot + shift) % len(pictures)])
                bound = [t.cpu().numpy() for t in model.run(bucket)]
                host = letterboxer.input[: bucket.size].cpu().numpy()
                fed = model.session.run(None, {name: host})
                if not all(
                    np.allclose(a, b, **INPUT_TOLERANCE) for a, b in zip(bound, fed, strict=True)
                ):
                    problems.append(
                        f"buffer {index} bucket {bucket.size}: ORT does not compute on what "
                        "the letterbox wrote"
                    )
                    break
    return problems


def _torch_segments(device: Any) -> list[tuple[int, int]]:
    import torch

    return [
        (s["address"], s["address"] + s["total_size"])
        for s in torch.cuda.memory_snapshot()
        if s.get("device", device.index or 0) == (device.index or 0)
    ]


def _inside(pointer: int, segments: list[tuple[int, int]]) -> bool:
    return any(start <= pointer < end for start, end in segments)
