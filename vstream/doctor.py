"""``vstream doctor``: what this machine has, and proof that vstream's data path works on it.

The one command a user with a GPU runs. It reports the environment (driver
and CUDA versions, torch and its CUDA, the ONNX Runtime wheel and providers,
PyNvVideoCodec, NVDEC and NVENC per codec) and runs checks, each ``pass``,
``fail`` or ``skip`` with a reason. Every check rests on evidence from
outside vstream's own bookkeeping (what ONNX Runtime reports, what torch's
CUDA allocator holds, what the profiler saw cross); a check that cannot
gather its evidence says ``skip`` and why, never ``pass``:

``runtime-wheels``  exactly one ONNX Runtime wheel is installed (the CPU and GPU
                    wheels overwrite each other's files).
``provider-cpu``    ``session.get_providers()`` of a CPU detector: ``CPUExecutionProvider``.
``provider-gpu``    ``session.get_providers()`` of a CUDA detector starts with
                    ``CUDAExecutionProvider``, and ``get_provider_options()`` reports the
                    pipeline's stream as ``user_compute_stream`` (none or 0 fails: ORT then
                    computes on a stream of its own).
``nvdec``           NVDEC decodes the bundled probe clip and matches FFmpeg.
``zero-copy-cpu``   ONNX Runtime reads the letterbox's tensor: for every bucket of every
``zero-copy-gpu``   buffer, the bound run's outputs equal ORT fed a copy of what the
                    letterbox wrote, for two different contents of that memory; ORT writes
                    where postprocessing reads: the output addresses ORT reports after
                    every run of the engine (``IOBinding.get_outputs()``,
                    ``OrtValue.data_ptr()``) are the preallocated tensors, the same every
                    run. On the GPU, with NVDEC decoding: every frame lies inside a segment
                    of torch's CUDA caching allocator (``torch.cuda.memory_snapshot()``),
                    not in a decoder's surface.
``copies-gpu``      torch's profiler (CUPTI) over the NVDEC pipeline: no frame-sized
                    host<->device copy, device-to-host bytes within the detections the
                    host received, one ``cudaEventSynchronize`` per model run and no other
                    host wait but those torch's sync debug mode reports and vstream counts.
``demo-cpu``        the bundled demo on the CPU reaches mAP@0.5 >= 0.9.
``demo-gpu``        NVDEC + GPU detections match the CPU's: >= 98 % of boxes matched at
                    IoU >= 0.9.
``reference-cpu``   Ultralytics' own predictions, stored with the parity videos
``reference-gpu``   (``vstream/assets/parity``): vstream run the same way finds the same
                    boxes, recall and precision >= 0.99 (same class, IoU >= 0.85), on the
                    CPU and with NVDEC + the device letterbox (:mod:`vstream.parity`).
``graphs-gpu``      CUDA graphs capture, and replay equals eager for every bucket.
``fps-cpu``         frames per second of each stage alone and end to end (with
``fps-gpu``         the device synchronised before each clock stop, so GPU work
                    is measured, not kernel launches), on the GPU with CUDA
                    graphs off and on.

Without a usable GPU the GPU checks are skipped with the reason, and so are
the NVDEC checks where NVDEC does not work (they fail instead with
``--device cuda``). The exit status is 0 when every check that ran passed, 1
when one failed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import logging
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from vstream import __version__
from vstream.assets import DEMO_MODEL, SAMPLE_GROUND_TRUTH, SAMPLE_VIDEO
from vstream.errors import first_line

log = logging.getLogger("vstream.doctor")

PASS, FAIL, SKIP = "pass", "fail", "skip"
MATCH_IOU = 0.9
"""IoU at which a GPU box counts as the same box as a CPU box."""
MATCH_FRACTION = 0.98
"""Share of boxes that must match between the GPU and the CPU path."""
DEMO_MAP = 0.9
"""mAP@0.5 the bundled demo model reaches on the bundled video (as the end-to-end tests hold)."""
DETECTION_BYTES = 7 * 4
"""Bytes of one detection row handed to the host: frame, x1, y1, x2, y2, score, class (float32)."""
BATCH = 4
SYNC_SLACK_BYTES = 64
"""Device-to-host bytes per batch allowed beyond the detections (counts read by NMS)."""


class Skipped(Exception):
    """The check cannot run here; the message says why."""


class Failed(Exception):
    """The check ran and found a problem; the message says which."""


@dataclass
class Check:
    """One check's outcome: ``pass``, ``fail`` or ``skip``, with one line and its numbers."""

    name: str
    title: str
    status: str = SKIP
    detail: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """The environment and every check."""

    environment: dict[str, Any]
    checks: list[Check]

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIP)}

    @property
    def exit_code(self) -> int:
        """0 when every check that ran passed, 1 when one failed."""
        return 1 if any(c.status == FAIL for c in self.checks) else 0

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "vstream": __version__,
            "environment": self.environment,
            "checks": [
                {
                    "name": c.name,
                    "title": c.title,
                    "status": c.status,
                    "detail": c.detail,
                    "seconds": round(c.seconds, 3),
                    "data": c.data,
                }
                for c in self.checks
            ],
            "summary": {"passed": counts[PASS], "failed": counts[FAIL], "skipped": counts[SKIP]},
            "exit_code": self.exit_code,
        }

    def table(self) -> str:
        """The report as a person reads it."""
        lines = [f"vstream doctor {__version__}", "", "environment"]
        for key, value in _flatten(self.environment):
            lines.append(f"  {key:<28} {value}")
        lines += ["", "checks"]
        width = max(len(c.name) for c in self.checks) if self.checks else 10
        for check in self.checks:
            lines.append(f"  {check.status.upper():<5} {check.name:<{width}}  {check.detail}")
        counts = self.counts()
        lines += [
            "",
            f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
            + (" (every check that ran passed)" if not counts[FAIL] else ""),
        ]
        return "\n".join(lines)


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        yield prefix, ", ".join(str(v) for v in value) or "(none)"
    else:
        yield prefix, str(value)


@dataclass(frozen=True)
class DoctorOptions:
    """What ``vstream doctor`` checks with: the device to hold to, the model and the video."""

    device: str = "auto"
    """``auto``: GPU checks where a GPU works, skipped otherwise; ``cpu``: GPU checks skipped;
    ``cuda``: GPU checks must run (they fail without a GPU)."""
    model: Path = DEMO_MODEL
    video: Path = SAMPLE_VIDEO
    frames: int = 120
    """Frames for each throughput figure and pipeline run."""
    quick: bool = False
    """Only the environment, providers, NVDEC and zero-copy."""


# -- the environment ------------------------------------------------------------------------------


def _safely(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception as exc:  # the environment report never fails the command
        return f"unknown ({first_line(exc)})"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> dict[str, Any]:
    found: dict[str, Any] = {}
    proc = Path("/proc/driver/nvidia/version")
    if proc.exists():
        match = re.search(r"Kernel Module\s+([\d.]+)", proc.read_text(errors="replace"))
        found["version"] = match.group(1) if match else "unknown"
    if shutil.which("nvidia-smi"):
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if done.returncode == 0:
            found["gpus"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    import ctypes

    try:
        library = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
        version = ctypes.c_int()
        if library.cuDriverGetVersion(ctypes.byref(version)) == 0:
            found["cuda_driver_api"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        found["cuda_driver_api"] = "libcuda not found (no NVIDIA driver)"
    return found or {"version": "no NVIDIA driver found"}


def _torch_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "version": torch.__version__,
        "built_for_cuda": torch.version.cuda or "no (CPU build)",
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["devices"] = []
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            info["devices"].append(f"{torch.cuda.get_device_name(index)} (sm_{major}{minor})")
    return info


def _ort_info() -> dict[str, Any]:
    from vstream.inference.wheels import installed_runtime_wheels, load_onnxruntime

    wheels = installed_runtime_wheels()
    info: dict[str, Any] = {
        "wheels": [f"{k} {v}" for k, v in wheels.items()],
        "cpu_and_gpu_wheels_both_installed": len(wheels) > 1,
    }
    if wheels:
        ort = load_onnxruntime()
        info["version"] = ort.__version__
        info["providers"] = list(ort.get_available_providers())
    return info


def _codec_support() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "torch sees no CUDA device"}
    if importlib.util.find_spec("PyNvVideoCodec") is None:
        return {"skipped": "PyNvVideoCodec is not installed"}
    from vstream.decoders.nvdec import CODECS, decoder_caps, load_pynvvideocodec

    nvc = load_pynvvideocodec()
    decode = {}
    for name, member in CODECS.items():
        caps = decoder_caps(nvc, 0, member)
        if caps is None:
            decode[name] = "unknown"
        elif caps.get("supported", 0):
            decode[name] = f"yes (up to {caps.get('width_max', '?')}x{caps.get('height_max', '?')})"
        else:
            decode[name] = "no"
    encode = {}
    query = getattr(nvc, "GetEncoderCaps", None)
    for name in ("h264", "hevc", "av1"):
        if query is None:
            encode[name] = "unknown (no GetEncoderCaps)"
            continue
        try:
            encode[name] = "yes" if query(gpuid=0, codec=name) else "no"
        except Exception as exc:  # the binding raises several types
            encode[name] = f"no ({first_line(exc)})"
    return {"nvdec_8bit_420": decode, "nvenc": encode}


def environment() -> dict[str, Any]:
    """What this machine has, each item found independently (a failure is reported, not raised)."""
    return {
        "vstream": __version__,
        "python": f"{platform.python_version()} ({platform.platform()})",
        "nvidia_driver": _safely(_driver),
        "torch": _safely(_torch_info),
        "onnxruntime": _safely(_ort_info),
        "pynvvideocodec": _version("PyNvVideoCodec") or "not installed",
        "codecs": _safely(_codec_support),
    }


# -- helpers ---------------------------------------------------------------------------------------


def gpu_problem() -> str | None:
    """Why the GPU path cannot run here, or None when torch and ONNX Runtime both have CUDA."""
    import torch

    from vstream.inference.wheels import load_onnxruntime

    if not torch.cuda.is_available():
        return (
            f"torch sees no CUDA device (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'none'})"
        )
    if "CUDAExecutionProvider" not in load_onnxruntime().get_available_providers():
        return "the installed ONNX Runtime has no CUDA provider (pip install 'vstream[gpu]')"
    return None


def _source(
    video: Path, device: Any, *, loop: bool = False, decoder: str = "auto", stream: Any = None
) -> Any:
    """The video as the engine's readers open it: on the pipeline's CUDA ``stream``, if any."""
    from vstream.config.sources import SourceOptions
    from vstream.sources.file import VideoFileSource

    options = SourceOptions(loop=loop, decoder=decoder)
    with contextlib.ExitStack() as context:
        if stream is not None:
            import torch

            context.enter_context(torch.cuda.stream(stream))
        return VideoFileSource(video, stream_id="doctor", device=device, options=options)


def _detect(detector: Any, video: Path, frames: int | None, *, decoder: str = "auto") -> list[Any]:
    """Records of the overlapped engine (a reader, three stage threads) on ``video``.

    ``frames`` frames of the video looped, or (None) the whole video once;
    each record says which decoder read it.
    """
    from vstream.engine.pipeline import detect_iter
    from vstream.transfer import settle

    names: list[str] = []
    with _source(
        video,
        detector.device,
        loop=frames is not None,
        decoder=decoder,
        stream=detector.cuda_stream,
    ) as source:

        def feed() -> Iterator[Any]:
            for frame in source:
                if not names:
                    names.append(source.decoder_name)
                yield frame

        frames_in: Iterable[Any] = feed() if frames is None else itertools.islice(feed(), frames)
        results = list(detect_iter(detector, [frames_in]))
    settle(detector.device)
    name = names[0] if names else None
    return [r.to_record() | {"decoder": name} for r in results]


def _detector(model: Path, device: str, *, graphs: bool = False) -> Any:
    from vstream.detector import Detector

    providers = None
    if device != "cpu":
        cuda_options = {"enable_cuda_graph": "1"} if graphs else {}
        providers = [{"name": "cuda", "options": cuda_options}, {"name": "cpu"}]
    return Detector(model, device=device, batch_size=BATCH, providers=providers)


def match_records(
    reference: list[dict[str, Any]], candidate: list[dict[str, Any]], iou: float = MATCH_IOU
) -> tuple[int, int]:
    """``(matched, total)``: boxes of the same frame and class paired at ``iou`` or better.

    ``total`` counts the larger side's boxes of each frame, so a box missing
    on either side counts against the match.
    """
    from vstream.parity import count_matches

    by_frame = {(r["stream"], r["frame"]): r["detections"] for r in candidate}
    reference_by_frame = {(r["stream"], r["frame"]): r["detections"] for r in reference}
    matched = total = 0
    for key in set(reference_by_frame) | set(by_frame):
        mine, theirs = reference_by_frame.get(key, []), by_frame.get(key, [])
        total += max(len(mine), len(theirs))
        matched += count_matches(mine, theirs, iou)
    return matched, total


class BindingSpy:
    """Stands in for a session's ``_run_bound``: runs it, then records where ORT says it wrote.

    The addresses are ORT's own report (``IOBinding.get_outputs()``, each
    ``OrtValue.data_ptr()``), read back after every run; :attr:`runs` counts
    the calls into ONNX Runtime.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.original = model._run_bound
        self.runs = 0
        self.outputs: dict[int, set[tuple[int, ...]]] = {}

    def __call__(self, bucket: Any, run_options: Any) -> None:
        self.original(bucket, run_options)
        self.runs += 1
        produced = tuple(value.data_ptr() for value in bucket.binding.get_outputs())
        self.outputs.setdefault(id(bucket), set()).add(produced)

    def __enter__(self) -> BindingSpy:
        self.model._run_bound = self
        return self

    def __exit__(self, *exc: object) -> None:
        del self.model._run_bound


def _zero_copy(
    detector: Any, video: Path, frames: int, *, decoder: str = "auto"
) -> tuple[str, dict[str, Any]]:
    """ORT reads the letterbox's tensor and writes where postprocessing reads, by ORT's evidence.

    Inputs: ONNX Runtime reports no input address (``IOBinding`` has no
    ``get_inputs``), so the proof is what it computes: see
    :func:`_bound_input_problems`. Outputs: the addresses ORT reports after
    every run of the overlapped engine are the tensors postprocessing reads.
    On CUDA, every frame preprocessing got lies in torch's allocator's memory.
    """
    import torch

    from vstream.devices import same_device

    model = detector.model
    problems = _bound_input_problems(detector, video, decoder)
    seen_frames: list[torch.Tensor] = []
    preprocess = detector.preprocess

    def recording(buffer: int, slot: int, frame: Any) -> Any:
        seen_frames.append(frame.data)
        return preprocess(buffer, slot, frame)

    detector.preprocess = recording
    try:
        with BindingSpy(model) as spy:
            records = _detect(detector, video, frames, decoder=decoder)
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


INPUT_TOLERANCE = {"rtol": 1e-3, "atol": 1e-2}
"""How close a bound run and a run fed a copy of its input must be (CUDA kernels may differ)."""


def _bound_input_problems(detector: Any, video: Path, decoder: str) -> list[str]:
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
    with _source(video, detector.device, decoder=decoder, stream=detector.cuda_stream) as source:
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


# -- the checks ------------------------------------------------------------------------------------


class Doctor:
    """Runs every check once, sharing detectors and results between them."""

    def __init__(self, options: DoctorOptions) -> None:
        self.options = options
        self.gpu_reason: str | None = None
        self.cpu_records: list[dict[str, Any]] | None = None
        self._cpu_detector: Any = None
        self._gpu_detector: Any = None

    def cpu_detector(self) -> Any:
        if self._cpu_detector is None:
            self._cpu_detector = _detector(self.options.model, "cpu")
        return self._cpu_detector

    def gpu_detector(self) -> Any:
        if self._gpu_detector is None:
            self._gpu_detector = _detector(self.options.model, "cuda")
            if self._gpu_detector.device.type != "cuda":
                raise Failed(f"asked for cuda, got {self._gpu_detector.device}")
        return self._gpu_detector

    def _nvdec(self) -> tuple[bool, str]:
        from vstream.decoders import nvdec_status

        return nvdec_status(self.gpu_detector().device)

    def _require_nvdec(self) -> None:
        """The GPU path decodes with NVDEC: without it there is nothing of it to prove."""
        works, why = self._nvdec()
        if not works:
            message = f"NVDEC does not work here ({why}): the GPU path cannot be shown"
            raise Failed(message) if self.options.device == "cuda" else Skipped(message)

    def _quick_skip(self) -> None:
        if self.options.quick:
            raise Skipped("skipped by --quick")

    # Every check returns (detail, data) or raises Skipped / Failed.

    def check_runtime_wheels(self) -> tuple[str, dict[str, Any]]:
        from vstream.inference.wheels import installed_runtime_wheels

        wheels = installed_runtime_wheels()
        listed = ", ".join(f"{k} {v}" for k, v in wheels.items())
        if not wheels:
            raise Failed("no ONNX Runtime: pip install 'vstream[cpu]' or 'vstream[gpu]'")
        if len(wheels) > 1:
            raise Failed(
                f"both wheels are installed ({listed}); they overwrite each other's files: "
                "uninstall both, then install one"
            )
        return f"{listed} only", {"wheels": wheels}

    def check_provider_cpu(self) -> tuple[str, dict[str, Any]]:
        providers = self.cpu_detector().model.providers
        if providers != ["CPUExecutionProvider"]:
            raise Failed(f"the CPU session runs on {providers}")
        return "CPUExecutionProvider", {"providers": providers}

    def check_provider_gpu(self) -> tuple[str, dict[str, Any]]:
        model = self.gpu_detector().model
        providers = model.providers
        if not providers or providers[0] != "CUDAExecutionProvider":
            raise Failed(f"the CUDA session runs on {providers}")
        options = model.session.get_provider_options().get("CUDAExecutionProvider", {})
        stream = model.cuda_stream.cuda_stream
        if "user_compute_stream" not in options:
            raise Skipped(
                "CUDAExecutionProvider runs, but this ONNX Runtime does not report "
                "user_compute_stream: the stream cannot be checked"
            )
        given = str(options["user_compute_stream"]).strip()
        if given in ("", "0"):
            raise Failed("ORT reports no user_compute_stream: it computes on a stream of its own")
        if int(given, 0) != stream:
            raise Failed(f"ORT computes on stream {given}, the pipeline's is {hex(stream)}")
        return (
            f"CUDAExecutionProvider on the pipeline's stream {hex(stream)}",
            {"providers": providers, "user_compute_stream": hex(stream)},
        )

    def check_nvdec(self) -> tuple[str, dict[str, Any]]:
        if importlib.util.find_spec("PyNvVideoCodec") is None:
            raise Skipped("PyNvVideoCodec is not installed (pip install 'vstream[gpu]')")
        works, why = self._nvdec()
        if not works:
            raise Failed(why)
        return why, {}

    def check_zero_copy_cpu(self) -> tuple[str, dict[str, Any]]:
        return _zero_copy(self.cpu_detector(), self.options.video, min(self.options.frames, 60))

    def check_zero_copy_gpu(self) -> tuple[str, dict[str, Any]]:
        self._require_nvdec()
        detail, data = _zero_copy(
            self.gpu_detector(), self.options.video, min(self.options.frames, 60), decoder="nvdec"
        )
        return f"NVDEC: {detail}", data

    def check_copies_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self._require_nvdec()
        return _copies(self.gpu_detector(), self.options.video, min(self.options.frames, 60))

    def check_demo_cpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        from vstream.evaluation import evaluate

        records = _detect(self.cpu_detector(), self.options.video, None)
        self.cpu_records = records
        if (self.options.model, self.options.video) != (DEMO_MODEL, SAMPLE_VIDEO):
            raise Skipped("no ground truth for this model and video (the bundled demo has one)")
        truth = json.loads(SAMPLE_GROUND_TRUTH.read_text())
        accuracy = evaluate(records, truth)
        data = {"frames": len(records), "map50": round(accuracy.mean, 4)}
        if accuracy.mean < DEMO_MAP:
            raise Failed(f"{accuracy} < {DEMO_MAP}")
        return f"{len(records)} frames, {accuracy}", data

    def check_demo_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self._require_nvdec()
        if self.cpu_records is None:
            self.cpu_records = _detect(self.cpu_detector(), self.options.video, None)
        records = _detect(self.gpu_detector(), self.options.video, None, decoder="nvdec")
        matched, total = match_records(self.cpu_records, records)
        share = matched / total if total else 1.0
        data = {
            "frames": len(records),
            "decoder": records[0]["decoder"] if records else None,
            "boxes": total,
            "matched": matched,
            "share": round(share, 4),
        }
        if len(records) != len(self.cpu_records):
            raise Failed(f"{len(records)} GPU records for {len(self.cpu_records)} CPU records")
        if share < MATCH_FRACTION:
            raise Failed(
                f"{matched} of {total} boxes ({share:.1%}) match the CPU's at IoU >= {MATCH_IOU}"
            )
        return (
            f"{matched} of {total} boxes ({share:.1%}) match the CPU path at IoU >= {MATCH_IOU} "
            f"({data['decoder']} decoder)"
        ), data

    def check_reference_cpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        return _reference(device="cpu")

    def check_reference_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self._require_nvdec()
        return _reference(device="cuda", decoder="nvdec")

    def check_graphs_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        import torch

        from vstream.transfer import settle

        graphs = _detector(self.options.model, "cuda", graphs=True)
        model = graphs.model
        if not model.cuda_graphs:
            raise Failed("the session did not enable CUDA graphs")
        worst = 0.0
        generator = torch.Generator(device="cpu").manual_seed(0)
        for buffer in model.buffers:
            noise = torch.rand(buffer.input.shape, generator=generator)
            buffer.input.copy_(noise.to(buffer.input.device, buffer.input.dtype))
            for bucket in buffer.buckets:
                replayed = [t.clone() for t in model.run(bucket)]
                eager = model.run(bucket, eager=True)
                for a, b in zip(replayed, eager, strict=True):
                    worst = max(worst, float((a.float() - b.float()).abs().max()))
        settle(model.device)
        graph_count = len(model.buffers) * len(model.bucket_sizes)
        data = {"graphs": graph_count, "max_abs_difference": worst}
        if worst > 1e-3:
            raise Failed(f"graph replay differs from eager by {worst:.2e}")
        return (
            f"{graph_count} graphs captured at build; replay = eager "
            f"(max abs difference {worst:.1e})"
        ), data

    def check_fps_cpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        figures = _throughput(self.cpu_detector(), self.options.video, self.options.frames)
        return _fps_line(figures), figures

    def check_fps_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        figures = {
            "graphs_off": _throughput(self.gpu_detector(), self.options.video, self.options.frames)
        }
        try:
            graphs = _detector(self.options.model, "cuda", graphs=True)
        except Exception as exc:  # a model that cannot be captured: figures without graphs
            figures["graphs_on"] = {"refused": first_line(exc)}
            return f"graphs off: {_fps_line(figures['graphs_off'])}; graphs refused", figures
        figures["graphs_on"] = _throughput(graphs, self.options.video, self.options.frames)
        return (
            f"graphs off: {_fps_line(figures['graphs_off'])}; "
            f"graphs on: {_fps_line(figures['graphs_on'])}"
        ), figures


CHECKS: tuple[tuple[str, str, bool], ...] = (
    ("runtime-wheels", "exactly one ONNX Runtime wheel", False),
    ("provider-cpu", "ORT runs on the CPU provider asked for", False),
    ("provider-gpu", "ORT runs on the CUDA provider asked for", True),
    ("nvdec", "NVDEC decodes the probe clip like FFmpeg", True),
    ("zero-copy-cpu", "ORT computes on the letterbox's tensor, outputs where read", False),
    ("zero-copy-gpu", "the same with NVDEC, frames in torch's CUDA allocator", True),
    ("copies-gpu", "no frame-sized host<->device copy per frame (profiler)", True),
    ("demo-cpu", "bundled demo on the CPU: mAP@0.5 >= 0.9", False),
    ("demo-gpu", "NVDEC + GPU detections match the CPU's (IoU >= 0.9, >= 98 %)", True),
    ("reference-cpu", "Ultralytics' detections on the parity videos (recall, precision)", False),
    ("reference-gpu", "the same with NVDEC and the device letterbox", True),
    ("graphs-gpu", "CUDA graphs capture; replay equals eager", True),
    ("fps-cpu", "frames per second per stage and end to end (CPU)", False),
    ("fps-gpu", "frames per second per stage and end to end, graphs off/on", True),
)
"""(name, what it proves, needs a GPU), in the order they run."""


HOST_WAIT_CALLS = ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize")
"""CUDA runtime calls in which the host waits for the device, as the profiler names them."""


def _copies(detector: Any, video: Path, frames: int) -> tuple[str, dict[str, Any]]:
    """Profile the NVDEC pipeline and count, from the profiler's trace, what crossed and waited.

    Copies and their bytes are CUPTI's (``gpu_memcpy`` events); host waits are
    the CUDA runtime calls that block (:data:`HOST_WAIT_CALLS`); implicit
    waits are torch's sync debug mode's warnings; model runs are counted at
    ONNX Runtime's entry point; the bytes the host needed are those of the
    detections it received.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    from vstream.transfer import transfers

    _detect(detector, video, 8, decoder="nvdec")  # warm: the first batches allocate and plan
    width, height = _video_size(video)
    frame_bytes = width * height * 3 // 2
    counted_before = transfers.implicit_sync_total()
    with tempfile.TemporaryDirectory() as folder, BindingSpy(detector.model) as spy:
        trace = Path(folder) / "trace.json"
        with warnings.catch_warnings(record=True) as syncs:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    records = _detect(detector, video, frames, decoder="nvdec")
            finally:
                torch.cuda.set_sync_debug_mode("default")
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
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
    if sum(map(size, to_host)) > detections + SYNC_SLACK_BYTES * max(1, spy.runs):
        problems.append(
            f"{data['dtoh_bytes_per_frame']} bytes per frame to the host; the detections are "
            f"{data['detection_bytes_per_frame']}"
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


def _reference(**options: Any) -> tuple[str, dict[str, Any]]:
    """vstream against Ultralytics' stored answers on every parity video (:mod:`vstream.parity`)."""
    from vstream.parity import MATCH_IOU, REQUIRED, measure, references

    found = references()
    if not found:
        raise Skipped("no reference answers in vstream/assets/parity")
    agreements = {r.video.name: measure(r, **options) for r in found}
    data = {
        name: {"recall": round(a.recall, 4), "precision": round(a.precision, 4), "boxes": a.ours}
        for name, a in agreements.items()
    }
    short = [f"{name}: {a}" for name, a in agreements.items() if not a.met]
    if short:
        raise Failed(f"below {REQUIRED} at IoU >= {MATCH_IOU}: " + "; ".join(short))
    worst = min(min(a.recall, a.precision) for a in agreements.values())
    return (
        f"{len(agreements)} videos, recall and precision >= {worst:.3f} at IoU >= {MATCH_IOU} "
        f"(same class)"
    ), data


def _video_size(video: Path) -> tuple[int, int]:
    import av

    with av.open(str(video)) as container:
        codec = container.streams.video[0].codec_context
        return codec.width, codec.height


def _throughput(detector: Any, video: Path, frames: int) -> dict[str, float]:
    """Frames per second of each stage alone and of the whole engine, device synchronised."""
    from vstream.transfer import settle

    device = detector.device
    batch = detector.batch_size
    figures: dict[str, float] = {}

    def timed(work: Callable[[], int]) -> float:
        settle(device)
        started = time.perf_counter()
        done = work()
        settle(device)
        return round(done / max(time.perf_counter() - started, 1e-9), 1)

    with _source(video, device, loop=True, stream=detector.cuda_stream) as source:
        pictures = iter(source)
        held = list(itertools.islice(pictures, batch))
        figures["decode"] = timed(lambda: sum(1 for _ in itertools.islice(pictures, frames)))

    def preprocess() -> int:
        for i in range(frames):
            detector.preprocess(0, i % batch, held[i % len(held)])
        return frames

    figures["preprocess"] = timed(preprocess)
    geometries = [detector.preprocess(0, slot, f) for slot, f in enumerate(held)]
    for _ in range(3):
        raw = detector.infer(0, batch)
    runs = max(1, frames // batch)

    def infer() -> int:
        for _ in range(runs):
            detector.infer(0, batch)
        return runs * batch

    figures["inference"] = timed(infer)

    def postprocess() -> int:
        for _ in range(runs):
            detector.postprocess(raw, geometries, held)
        return runs * batch

    figures["postprocess"] = timed(postprocess)
    figures["end_to_end"] = timed(lambda: len(_detect(detector, video, frames)))
    return figures


def _fps_line(figures: dict[str, float]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in figures.items()) + " fps"


def run_doctor(
    options: DoctorOptions | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Gather the environment and run every check; never raises for what a check finds."""
    options = options or DoctorOptions()
    doctor = Doctor(options)
    env = environment()
    if options.device == "cpu":
        doctor.gpu_reason = "--device cpu"
    else:
        try:
            doctor.gpu_reason = gpu_problem()
        except Exception as exc:
            doctor.gpu_reason = first_line(exc)
    checks = []
    for name, title, needs_gpu in CHECKS:
        if progress is not None:
            progress(name)
        check = Check(name, title)
        started = time.perf_counter()
        try:
            if needs_gpu and doctor.gpu_reason is not None:
                if options.device == "cuda":
                    raise Failed(f"CUDA was asked for, but {doctor.gpu_reason}")
                raise Skipped(f"no usable GPU: {doctor.gpu_reason}")
            method = getattr(doctor, "check_" + name.replace("-", "_"))
            check.detail, check.data = method()
            check.status = PASS
        except Skipped as exc:
            check.status, check.detail = SKIP, str(exc)
        except Failed as exc:
            check.status, check.detail = FAIL, str(exc)
        except Exception as exc:  # a check that breaks is a failed check, with its reason
            log.debug("check %s failed", name, exc_info=True)
            check.status, check.detail = FAIL, f"{type(exc).__name__}: {first_line(exc)}"
        check.seconds = time.perf_counter() - started
        checks.append(check)
    return Report(env, checks)


@contextlib.contextmanager
def quiet_logs(level: int = logging.WARNING) -> Iterator[None]:
    """Keep the pipeline's info lines out of the doctor's output."""
    logger = logging.getLogger("vstream")
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)
