"""The checks in the order they run, the state they share, and the run that makes the report.

:data:`CHECKS` is the list a user reads; :class:`Doctor` holds what the
checks share (one CPU and one CUDA detector, built on first use, and the CPU
path's records, which the GPU path is compared with) and decides, before an
area module does the work, whether a check runs at all: ``--quick``, and
NVDEC for the checks that prove the GPU path. :func:`run_doctor` turns each
outcome into a :class:`~vstream.doctor.report.Check`, so that a check that
breaks fails alone and the others still run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vstream.assets import DEMO_MODEL, SAMPLE_VIDEO
from vstream.doctor import accuracy, copies, graphs, kernel, providers, throughput, zero_copy
from vstream.doctor.environment import environment, gpu_problem
from vstream.doctor.harness import build_detector, detect_records
from vstream.doctor.report import FAIL, PASS, SKIP, Check, Failed, Report, Skipped
from vstream.errors import first_line

log = logging.getLogger("vstream.doctor")

CHECKS: tuple[tuple[str, str, bool], ...] = (
    ("runtime-wheels", "one ONNX Runtime wheel a folder", False),
    ("provider-cpu", "ORT runs on the CPU provider asked for", False),
    ("provider-gpu", "ORT runs on the GPU provider asked for (CUDA or TensorRT)", True),
    ("nvdec", "NVDEC decodes the probe clip like FFmpeg", True),
    ("zero-copy-cpu", "ORT computes on the letterbox's tensor, outputs where read", False),
    ("zero-copy-gpu", "the same with NVDEC, frames in torch's CUDA allocator", True),
    ("copies-gpu", "no frame-sized host<->device copy per frame (profiler)", True),
    ("demo-cpu", "bundled demo on the CPU: mAP@0.5 >= 0.9", False),
    ("demo-gpu", "NVDEC + GPU detections match the CPU's (IoU >= 0.9, >= 98 %)", True),
    ("reference-cpu", "Ultralytics' detections on the parity videos (recall, precision)", False),
    ("reference-gpu", "the same with NVDEC and the device letterbox", True),
    ("kernel-gpu", "the letterbox kernel (runtime.letterbox_kernel) equals torch's", True),
    ("graphs-gpu", "CUDA graphs capture; replay equals eager", True),
    ("fps-cpu", "frames per second per stage and end to end (CPU)", False),
    ("fps-gpu", "frames per second per stage and end to end, graphs off/on", True),
)
"""(name, what it proves, needs a GPU), in the order they run."""


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
    provider: str = "auto"
    """``runtime.provider`` of the GPU checks' detector: ``tensorrt`` proves and times the
    TensorRT path (its fp16 detections against the reference included)."""


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
            self._cpu_detector = build_detector(self.options.model, "cpu")
        return self._cpu_detector

    def gpu_detector(self) -> Any:
        if self._gpu_detector is None:
            self._gpu_detector = build_detector(
                self.options.model, "cuda", provider=self.options.provider
            )
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

    def _pipeline_frames(self) -> int:
        """Frames for a check that watches the pipeline run, not one that times it."""
        return min(self.options.frames, 60)

    # Every check returns (detail, data) or raises Skipped / Failed.

    def check_runtime_wheels(self) -> tuple[str, dict[str, Any]]:
        return providers.runtime_wheels()

    def check_provider_cpu(self) -> tuple[str, dict[str, Any]]:
        return providers.cpu_provider(self.cpu_detector().model)

    def check_provider_gpu(self) -> tuple[str, dict[str, Any]]:
        return providers.gpu_provider(self.gpu_detector().model, self.options.provider)

    def check_nvdec(self) -> tuple[str, dict[str, Any]]:
        if importlib.util.find_spec("PyNvVideoCodec") is None:
            raise Skipped("PyNvVideoCodec is not installed (pip install 'vstream[gpu]')")
        works, why = self._nvdec()
        if not works:
            raise Failed(why)
        return why, {}

    def check_zero_copy_cpu(self) -> tuple[str, dict[str, Any]]:
        return zero_copy.zero_copy(self.cpu_detector(), self.options.video, self._pipeline_frames())

    def check_zero_copy_gpu(self) -> tuple[str, dict[str, Any]]:
        self._require_nvdec()
        detail, data = zero_copy.zero_copy(
            self.gpu_detector(), self.options.video, self._pipeline_frames(), decoder="nvdec"
        )
        return f"NVDEC: {detail}", data

    def check_copies_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self._require_nvdec()
        return copies.count_copies(self.gpu_detector(), self.options.video, self._pipeline_frames())

    def check_demo_cpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self.cpu_records = detect_records(self.cpu_detector(), self.options.video, None)
        return accuracy.demo_accuracy(self.cpu_records, self.options.model, self.options.video)

    def check_demo_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self._require_nvdec()
        if self.cpu_records is None:
            self.cpu_records = detect_records(self.cpu_detector(), self.options.video, None)
        records = detect_records(self.gpu_detector(), self.options.video, None, decoder="nvdec")
        return accuracy.gpu_matches_cpu(self.cpu_records, records)

    def check_reference_cpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        return accuracy.reference_agreement(device="cpu")

    def check_reference_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        self._require_nvdec()
        return accuracy.reference_agreement(
            device="cuda", decoder="nvdec", provider=self.options.provider
        )

    def check_kernel_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        return kernel.kernel_matches_torch()

    def check_graphs_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        return graphs.graphs_match_eager(self.options.model)

    def check_fps_cpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        return throughput.fps_cpu(self.cpu_detector(), self.options.video, self.options.frames)

    def check_fps_gpu(self) -> tuple[str, dict[str, Any]]:
        self._quick_skip()
        return throughput.fps_gpu(
            self.gpu_detector(), self.options.model, self.options.video, self.options.frames
        )


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
