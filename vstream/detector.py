"""The detector: preprocessing, the model and postprocessing on one device.

A :class:`Detector` is the data path of one pipeline without any threads:
frames are letterboxed straight into the model's bound input, the model
writes into its preallocated outputs, boxes are decoded on the device, and
only the compact detections tensor is copied to the host
(:func:`vstream.transfer.to_host`). :meth:`Detector.detect` runs the three
steps one after the other on the calling thread; the engine
(:mod:`vstream.engine`, :func:`vstream.engine.detect_iter` for any iterables
of frames) runs them overlapped, through the three step methods
(:meth:`preprocess`, :meth:`infer`, :meth:`postprocess`), which is all it
needs to know of a detector. The detector knows nothing of the engine: the
arrow points one way only (``tests/test_imports.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vstream.config.detector_options import split_options
from vstream.config.model import (
    ModelConfig,
    PostprocessOptions,
    RuntimeOptions,
    absent_classes,
    describe_classes,
)
from vstream.errors import ModelError
from vstream.frame import Channels, Frame, as_frame
from vstream.inference.plan import plan_runs
from vstream.inference.providers import resolve_device
from vstream.inference.session import ModelSession
from vstream.inference.wheels import load_onnxruntime
from vstream.masks import box_windows, unpack_masks
from vstream.postprocess.decode import FixedShapes, Postprocessor
from vstream.postprocess.fit import fit_model
from vstream.postprocess.formats import (
    FAMILIES,
    PREPROCESSING_FIELDS,
    Preprocessing,
    resolve_preprocessing,
)
from vstream.postprocess.masks import mask_bits
from vstream.postprocess.tasks import Task, TaskSpec
from vstream.preprocess.letterbox import Letterboxer, LetterboxGeometry
from vstream.preprocess.resample import Resampler
from vstream.results import MASKS, FrameResult, split_by_frame
from vstream.transfer import HostStaging, to_host, transfers

if TYPE_CHECKING:
    from vstream.preprocess.kernel import LetterboxKernel

log = logging.getLogger("vstream.engine")


class Detector:
    """Runs an ONNX detector on batches of frames and returns per-frame results.

    Options are those of a pipelines file's ``model:``, ``postprocess:`` and
    ``runtime:`` sections, as keyword arguments
    (``Detector("yolov8n.onnx", device="cpu", conf=0.3, batch_size=4)``), or
    the config objects themselves (:meth:`from_config`). ``batch_size`` is the
    most frames per model run; smaller batches run in the smallest bucket that
    holds them. A detector is used by one caller at a time.

    >>> detector = Detector("model.onnx", device="cpu")     # doctest: +SKIP
    >>> results = detector.detect(frames)                    # doctest: +SKIP
    """

    def __init__(self, model: str | Path | ModelConfig, **options: Any) -> None:
        config, post, runtime = split_options(model, options)
        self._build(config, post, runtime)

    @classmethod
    def from_config(
        cls, model: ModelConfig, postprocess: PostprocessOptions, runtime: RuntimeOptions
    ) -> Detector:
        """A detector for the ``model``, ``postprocess`` and ``runtime`` sections of a pipeline."""
        detector = cls.__new__(cls)
        detector._build(model, postprocess, runtime)
        return detector

    def _build(
        self, model: ModelConfig, postprocess: PostprocessOptions, runtime: RuntimeOptions
    ) -> None:
        self.config = model
        self.runtime = runtime
        device = resolve_device(runtime.device, load_onnxruntime().get_available_providers())
        plan = plan_runs(model, runtime, device.type)
        self.model = ModelSession(
            model.model_copy(update={"intra_op_threads": plan.threads_per_run}),
            runtime.model_copy(
                update={
                    "device": str(device),
                    "concurrent_runs": plan.concurrent_runs,
                    "in_flight": plan.buffers,
                }
            ),
        )
        self.plan = plan
        """How many runs the engine keeps in flight, with how many threads and buffers."""
        log.info("%s on %s: model runs: %s", Path(model.path).name, device, self.plan.describe())
        fit = fit_model(
            self.model.spec,
            model,
            self.model.input_size,
            [tuple(t.shape) if t is not None else None for t in self.model.outputs],
        )
        self.task: TaskSpec = fit.task
        self.recognition = fit.recognition
        """The family, which output plays which part, and why (``vstream info`` prints it)."""
        self.keypoint_names = fit.keypoint_names
        """A pose model's keypoint names: the config's, the metadata's, COCO's for 17."""
        self.class_names = fit.class_names
        self.output_format = self.recognition.format
        family = FAMILIES[self.output_format]
        self.preprocessing: Preprocessing
        self.preprocessing, self.preprocessing_reasons = self._preprocessing(
            model, family.preprocessing
        )
        normalise = self.preprocessing.normalisation()
        resampler = Resampler(frames=self.model.batch_size, kernel=self._letterbox_kernel())
        self.letterboxers = tuple(
            Letterboxer(b.input, model.resize, self.preprocessing.resize_mode, normalise, resampler)
            for b in self.model.buffers
        )
        """One per model buffer, each remembering the padding of its own slots."""
        self.staging = HostStaging(pinned=self.model.device.type == "cuda")
        if absent := absent_classes(postprocess.classes or (), self.class_names):
            raise ModelError(
                f"{self.model.spec.path.name}: classes to keep {absent} (postprocess.classes, "
                f"--classes) are not classes of the model, which has "
                f"{describe_classes(self.class_names)}"
            )
        self.postprocessor = Postprocessor(
            self.output_format,
            postprocess,
            self.model.device,
            self.model.input_size,
            self.recognition.order,
            self.task,
            self.recognition.no_object,
        )
        self.mask_format = postprocess.mask_format
        self.fixed_shapes = (
            FixedShapes(self.postprocessor)
            if self.model.device.type == "cuda" and self.task.task is Task.DETECT
            else None
        )
        """The postprocess without host waits but its copy, where waits cost (CUDA); None runs
        the exact path alone (on a CPU nothing waits, and its NMS costs less; masks need the
        kept boxes' rows, and pose and OBB models their extra columns, which only the exact
        path gives)."""

    def _letterbox_kernel(self) -> LetterboxKernel | None:
        """The CUDA letterbox kernel where ``runtime.letterbox_kernel`` asks for it and the
        model runs on CUDA (``device: auto`` may have chosen the CPU: said in one line)."""
        if not self.runtime.letterbox_kernel:
            return None
        device = self.model.device
        if device.type != "cuda":
            log.warning(
                "runtime.letterbox_kernel: the model runs on %s, so torch letterboxes", device
            )
            return None
        from vstream.preprocess.kernel import LetterboxKernel

        kernel = LetterboxKernel(device)
        log.info("letterbox on %s: one CUDA kernel a batch (%s)", device, kernel.architecture)
        return kernel

    def _preprocessing(
        self, model: ModelConfig, family: Preprocessing
    ) -> tuple[Preprocessing, tuple[str, ...]]:
        """The preprocessing from the config, the metadata, a ``preprocessor_config.json``
        beside the model, the family; with the reasons, and what that file asks that vstream
        does otherwise (logged once)."""
        config = {name: getattr(model, name) for name in PREPROCESSING_FIELDS}
        processor = self.model.spec.processor
        files = []
        notes: tuple[str, ...] = ()
        if processor is not None:
            files.append((processor.source, {n: getattr(processor, n) for n in config}))
            notes = tuple(f"{processor.source}: {note}" for note in processor.notes)
            for note in notes:
                log.warning("%s: %s", Path(model.path).name, note)
        made, reasons = resolve_preprocessing(family, self.model.spec.channels, config, files)
        return made, (*reasons, *notes)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def batch_size(self) -> int:
        return self.model.batch_size

    @property
    def buffers(self) -> int:
        """Batches that can be in flight at once, each in a model buffer of its own."""
        return len(self.model.buffers)

    @property
    def concurrent_runs(self) -> int:
        """Model runs the engine may have in flight at once, each on a buffer of its own."""
        return self.plan.concurrent_runs

    @property
    def cuda_stream(self) -> torch.cuda.Stream | None:
        """The CUDA stream the model runs on, which the stages queue their work on too."""
        return self.model.cuda_stream

    @property
    def letterboxer(self) -> Letterboxer:
        """The letterboxer of the first buffer, the one :meth:`detect` uses."""
        return self.letterboxers[0]

    def preprocess(self, buffer: int, slot: int, frame: Frame) -> LetterboxGeometry:
        """Letterbox ``frame`` into batch slot ``slot`` of model buffer ``buffer``."""
        return self.letterboxers[buffer].load(slot, frame)

    def preprocess_batch(self, buffer: int, frames: Sequence[Frame]) -> list[LetterboxGeometry]:
        """Letterbox ``frames`` into the first slots of model buffer ``buffer``, together."""
        return self.letterboxers[buffer].load_batch(0, frames)

    def infer(self, buffer: int, frames: int) -> list[torch.Tensor]:
        """Run the model on the first ``frames`` slots of ``buffer``; its outputs.

        The batch runs in the smallest bucket that holds it; rows past
        ``frames`` hold whatever the bucket's other slots held and are ignored.
        """
        bucket = self.model.buffers[buffer].bucket_for(frames)
        return self.model.run(bucket)

    def postprocess(
        self,
        raw: Sequence[torch.Tensor],
        geometries: Sequence[LetterboxGeometry],
        frames: Sequence[Frame],
    ) -> list[FrameResult]:
        """Boxes of ``frames`` from the model output, in each frame's own pixels, on the host."""
        if self.task.task is Task.SEGMENT:
            return self._with_masks(raw, geometries, frames)
        if self.fixed_shapes is not None:
            packed = to_host(self.fixed_shapes(raw, geometries), self.staging)
            detections = self.fixed_shapes.unpack(packed)
            if detections is not None:
                return split_by_frame(detections, frames, self.class_names)
            transfers.implicit_sync("window")  # a frame beyond the window: done again, exactly
        detections = self.postprocessor(raw, geometries)
        return split_by_frame(
            to_host(detections, self.staging),
            frames,
            self.class_names,
            self.task.keypoints,
            self.task.task is Task.OBB,
        )

    def _with_masks(
        self,
        raw: Sequence[torch.Tensor],
        geometries: Sequence[LetterboxGeometry],
        frames: Sequence[Frame],
    ) -> list[FrameResult]:
        """Boxes as :meth:`postprocess` gives them, each with its mask in the :data:`MASKS`
        column: made on the device for the kept boxes only, copied as bits in the boxes'
        windows (a second copy, sized by the boxes the first one brought)."""
        detections, rows = self.postprocessor.decode(raw, geometries)
        host = to_host(detections, self.staging)
        results = split_by_frame(host, frames, self.class_names)  # copies: host is reused below
        frame = host[:, 0].astype(np.int64)
        windows = box_windows(host[:, 1:5])
        sizes = [(f.width, f.height) for f in frames]
        bits = mask_bits(
            raw[self.task.aux[0]],
            self.postprocessor.task_values(raw, detections[:, 0].long(), rows),
            frame,
            windows,
            sizes,
            self.preprocessing.resize_mode == "letterbox",
        )
        owners = [sizes[i] for i in frame.tolist()]
        masks = unpack_masks(to_host(bits, self.staging), windows, owners, self.mask_format)
        column = np.empty(len(masks), dtype=object)
        column[:] = masks
        bounds = np.searchsorted(frame, np.arange(len(frames) + 1)).tolist()
        return [
            dataclasses.replace(
                result,
                detections=result.detections.with_columns(data={MASKS: column[start:end]}),
            )
            for result, start, end in zip(results, bounds[:-1], bounds[1:], strict=True)
        ]

    def detect(
        self, frames: Sequence[Frame | Any], channels: Channels | None = None
    ) -> list[FrameResult]:
        """Detect objects in up to :attr:`batch_size` pictures at once, on the calling thread.

        Each is a :class:`Frame`, or a picture as other tools hold one: a numpy array
        ``(H, W, 3)`` ``uint8`` (BGR, OpenCV's order, unless ``channels="rgb"``), a
        torch tensor ``(H, W, 3)`` or ``(3, H, W)`` ``uint8`` (RGB unless
        ``channels="bgr"``) or a PIL image (:func:`vstream.frame.as_frame`).
        """
        if not 0 < len(frames) <= self.batch_size:
            raise ValueError(f"expected 1 to {self.batch_size} frames, got {len(frames)}")
        frames = [as_frame(f, channels, index=i) for i, f in enumerate(frames)]
        geometries = self.preprocess_batch(0, frames)
        return self.postprocess(self.infer(0, len(frames)), geometries, frames)
