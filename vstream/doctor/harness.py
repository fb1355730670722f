"""The pipeline as the checks drive it, and the spy that watches ONNX Runtime run it.

Every check that runs frames builds its detector, opens the video and runs
the overlapped engine the same way, so that what one check proves holds for
what another measures: the batch (:func:`batch_for`), the providers, the
reader on the pipeline's CUDA stream. :class:`BindingSpy` records what ONNX
Runtime itself says after each run, the evidence the zero-copy and copies
checks rest on instead of vstream's own bookkeeping.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

BATCH = 4
"""Frames per model run, where the model does not fix its own."""


def batch_for(model: Path) -> int:
    """:data:`BATCH`, or the batch ``model`` fixes (Ultralytics exports 1 by default): the
    checks prove the model as it is, not fail every one of them on its batch."""
    from vstream.inference.model import open_for_inspection, read_model_spec

    return read_model_spec(open_for_inspection(model, "model"), model).fixed_batch or BATCH


def build_detector(
    model: Path, device: str, *, graphs: bool = False, provider: str = "auto"
) -> Any:
    """A detector of :func:`batch_for` frames on ``device``; on CUDA, ``provider``
    (``runtime.provider``), or the CUDA provider with CUDA graphs when ``graphs``."""
    from vstream.detector import Detector

    batch = batch_for(model)
    if device == "cpu":
        return Detector(model, device=device, batch_size=batch)
    if provider == "tensorrt" and not graphs:
        return Detector(model, device=device, batch_size=batch, provider=provider)
    cuda_options = {"enable_cuda_graph": "1"} if graphs else {}
    providers = [{"name": "cuda", "options": cuda_options}, {"name": "cpu"}]
    return Detector(model, device=device, batch_size=batch, providers=providers)


def open_video(
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


def detect_records(
    detector: Any, video: Path, frames: int | None, *, decoder: str = "auto", settled: bool = True
) -> list[dict[str, Any]]:
    """Records of the overlapped engine (a reader, three stage threads) on ``video``.

    ``frames`` frames of the video looped, or (None) the whole video once;
    each record says which decoder read it. ``settled``: the device has
    finished the work when this returns (for clocks); the copies check, which
    counts the host's waits, does without that wait of its own.
    """
    from vstream.engine.pipeline import detect_iter
    from vstream.transfer import settle

    names: list[str] = []
    with open_video(
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
    if settled:
        settle(detector.device)
    name = names[0] if names else None
    return [r.to_record() | {"decoder": name} for r in results]


def video_size(video: Path) -> tuple[int, int]:
    """``(width, height)`` of the video's first video stream."""
    import av

    with av.open(str(video)) as container:
        codec = container.streams.video[0].codec_context
        return codec.width, codec.height


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
