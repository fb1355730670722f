"""The detector: preprocessing, inference and postprocessing wired on one device."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from vstream.errors import ModelError
from vstream.frame import Frame
from vstream.inference import InferenceEngine, ProviderChoice
from vstream.postprocess import OutputFormat, PostprocessConfig, Postprocessor
from vstream.postprocess.formats import check_output_shape, class_count, detect_output_format
from vstream.preprocess import Letterboxer
from vstream.results import FrameResult, split_by_frame
from vstream.transfer import to_host


class Detector:
    """Runs an ONNX detector on batches of frames and returns per-frame results.

    Frames are letterboxed straight into the engine's bound input tensor,
    the model writes into its preallocated outputs, and boxes are decoded on
    the device; only the compact detections tensor is copied to the host.

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
        )
        self.letterboxer = Letterboxer(self.engine.input)
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

    def detect(self, frames: Sequence[Frame]) -> list[FrameResult]:
        """Detect objects in up to :attr:`batch_size` frames at once."""
        if not 0 < len(frames) <= self.batch_size:
            raise ValueError(f"expected 1 to {self.batch_size} frames, got {len(frames)}")
        geometries = [self.letterboxer.load(slot, f) for slot, f in enumerate(frames)]
        raw = self.engine.run()[0]
        detections = self.postprocessor(raw, geometries)
        return split_by_frame(to_host(detections), frames, self.class_names)

    def stream(self, frames: Iterable[Frame]) -> Iterator[FrameResult]:
        """Detect in every frame of ``frames``, in batches, yielding results in order."""
        source = iter(frames)
        batch: list[Frame] = []
        while True:
            try:
                frame = next(source)
            except StopIteration:
                break
            except Exception:
                # The source failed: the frames it delivered before failing still count.
                if batch:
                    yield from self.detect(batch)
                raise
            batch.append(frame)
            if len(batch) == self.batch_size:
                yield from self.detect(batch)
                batch = []
        if batch:
            yield from self.detect(batch)
