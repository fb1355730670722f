"""The detector: preprocessing, inference and postprocessing wired on one device.

:meth:`Detector.detect` runs the three steps one after the other on a batch;
:meth:`Detector.stream` and :meth:`Detector.streams` run them overlapped on
threads of their own (:mod:`vstream.pipeline.stages`), with decoding on a
thread per source, which is what ``vstream run`` and the daemon use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from vstream.errors import ModelError
from vstream.frame import Frame
from vstream.inference import InferenceEngine, ProviderChoice
from vstream.pipeline.stages import DEFAULT_BATCH_TIMEOUT
from vstream.pipeline.streams import detect_streams
from vstream.postprocess import OutputFormat, PostprocessConfig, Postprocessor
from vstream.postprocess.formats import check_output_shape, class_count, detect_output_format
from vstream.preprocess import Letterboxer
from vstream.preprocess.letterbox import LetterboxGeometry
from vstream.results import FrameResult, split_by_frame
from vstream.transfer import HostStaging, to_host


class Detector:
    """Runs an ONNX detector on batches of frames and returns per-frame results.

    Frames are letterboxed straight into the engine's bound input tensor,
    the model writes into its preallocated outputs, and boxes are decoded on
    the device; only the compact detections tensor is copied to the host.

    ``batch_size`` is the most frames per model run; smaller batches run in
    the smallest bucket that holds them. ``in_flight`` is how many batches
    :meth:`stream` keeps in flight (gathered, in the model, in
    postprocessing), each in buffers of its own. ``intra_op_threads`` and
    ``spin_wait`` set ONNX Runtime's CPU threads; see :class:`InferenceEngine`.
    A detector is used by one caller at a time.

    >>> detector = Detector("model.onnx", device="cpu")     # doctest: +SKIP
    >>> for result in detector.stream(VideoFileSource("video.mp4")):  # doctest: +SKIP
    ...     print(result.frame_index, len(result.detections))
    """

    def __init__(
        self,
        model: str | Path,
        *,
        device: str = "auto",
        imgsz: int | tuple[int, int] | None = None,
        conf: float = 0.25,
        iou: float = 0.45,
        classes: Sequence[int] | None = None,
        max_det: int = 300,
        batch_size: int | None = None,
        output_format: OutputFormat | str | None = None,
        class_names: Mapping[int, str] | Sequence[str] | None = None,
        providers: Sequence[ProviderChoice] | None = None,
        intra_op_threads: int = 0,
        spin_wait: bool = False,
        in_flight: int = 3,
    ) -> None:
        try:
            config = PostprocessConfig(
                conf=conf,
                iou=iou,
                classes=tuple(classes) if classes is not None else None,
                max_det=max_det,
            )
        except ValueError as exc:
            raise ModelError(str(exc)) from exc
        self.engine = InferenceEngine(
            model,
            device=device,
            batch_size=batch_size,
            imgsz=imgsz,
            providers=providers,
            intra_op_threads=intra_op_threads,
            spin_wait=spin_wait,
            buffers=in_flight,
        )
        self.letterboxers = tuple(Letterboxer(b.input) for b in self.engine.buffers)
        """One per engine buffer, each remembering the padding of its own slots."""
        self.staging = HostStaging(pinned=self.engine.device.type == "cuda")
        detections_output = self.engine.outputs[0]
        if detections_output is None:
            raise ModelError(
                f"{self.engine.spec.path.name}: the size of output "
                f"{self.engine.spec.outputs[0].name!r} is not fixed; a detector output must be"
            )
        shape = tuple(detections_output.shape)
        if output_format is None:
            self.output_format = detect_output_format(shape)
        else:
            self.output_format = OutputFormat(output_format)
            check_output_shape(self.output_format, shape)
        self.class_names = self._class_names(class_names, shape)
        self.postprocessor = Postprocessor(self.output_format, config, self.engine.device)

    def _class_names(
        self, given: Mapping[int, str] | Sequence[str] | None, shape: tuple[int, ...]
    ) -> dict[int, str]:
        if given is None:
            names = dict(self.engine.spec.class_names)
        elif isinstance(given, Mapping):
            names = {int(k): str(v) for k, v in given.items()}
        else:
            names = dict(enumerate(given))
        expected = class_count(self.output_format, shape)
        if names and expected is not None and len(names) != expected:
            raise ModelError(
                f"{self.engine.spec.path.name}: {len(names)} class names for a model "
                f"with {expected} classes"
            )
        return names

    @property
    def device(self) -> torch.device:
        return self.engine.device

    @property
    def batch_size(self) -> int:
        return self.engine.batch_size

    @property
    def letterboxer(self) -> Letterboxer:
        """The letterboxer of the first buffer, the one :meth:`detect` uses."""
        return self.letterboxers[0]

    def preprocess(self, buffer: int, slot: int, frame: Frame) -> LetterboxGeometry:
        """Letterbox ``frame`` into batch slot ``slot`` of engine buffer ``buffer``."""
        return self.letterboxers[buffer].load(slot, frame)

    def infer(self, buffer: int, frames: int) -> torch.Tensor:
        """Run the model on the first ``frames`` slots of ``buffer``; its detector output.

        The batch runs in the smallest bucket that holds it; rows past
        ``frames`` hold whatever the bucket's other slots held and are ignored.
        """
        bucket = self.engine.buffers[buffer].bucket_for(frames)
        return self.engine.run(bucket)[0]

    def postprocess(
        self, raw: torch.Tensor, geometries: Sequence[LetterboxGeometry], frames: Sequence[Frame]
    ) -> list[FrameResult]:
        """Boxes of ``frames`` from the model output, in each frame's own pixels, on the host."""
        detections = self.postprocessor(raw, geometries)
        return split_by_frame(to_host(detections, self.staging), frames, self.class_names)

    def detect(self, frames: Sequence[Frame]) -> list[FrameResult]:
        """Detect objects in up to :attr:`batch_size` frames at once, on the calling thread."""
        if not 0 < len(frames) <= self.batch_size:
            raise ValueError(f"expected 1 to {self.batch_size} frames, got {len(frames)}")
        geometries = [self.preprocess(0, slot, f) for slot, f in enumerate(frames)]
        return self.postprocess(self.infer(0, len(frames)), geometries, frames)

    def stream(
        self, frames: Iterable[Frame], *, batch_timeout: float = DEFAULT_BATCH_TIMEOUT
    ) -> Iterator[FrameResult]:
        """Detect in every frame of ``frames``, in batches, yielding results in order.

        Decoding (iterating ``frames``), preprocessing, the model and
        postprocessing overlap on threads of their own. If ``frames`` raises,
        the frames before the error are still yielded, then the error is raised.
        """
        return detect_streams(self, [frames], batch_timeout=batch_timeout)

    def streams(
        self,
        sources: Sequence[Iterable[Frame]],
        *,
        batch_timeout: float = DEFAULT_BATCH_TIMEOUT,
    ) -> Iterator[FrameResult]:
        """Detect in several sources at once, their frames batched together.

        Each source's results come in its own order, interleaved with the
        others' as batches finish; a batch leaves at most ``batch_timeout``
        seconds after its first frame, so a slow source never holds back the
        others for longer.
        """
        return detect_streams(self, sources, batch_timeout=batch_timeout)
