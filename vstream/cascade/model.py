"""A secondary model: each selected object's crop through a classifier or an embedder.

Bound the way the detector is (:mod:`vstream.inference.session`): one input
batch of ``max_batch`` crops and one output buffer are allocated once on the
pipeline's device and bound to ONNX Runtime by address, one IO binding per
batch bucket (1, 2, 4 ... ``max_batch``, views of the same two buffers), so
a frame with 5 objects runs a batch of 8, not of 32, and more crops than
``max_batch`` run in chunks through the same buffers. Crops are cut from the
decoded frame on its device (:mod:`vstream.cascade.crops`) and normalised
straight into their slots; what leaves the device is the result columns: a
label id and a score per object, or an embedding.

On CUDA every step (the crops, the run, softmax and argmax) is queued on the
pipeline's stream, the one the detector runs on, given as ``cuda_stream``:
ONNX Runtime gets it as ``user_compute_stream`` and returns without
synchronising; the host waits once per call, on an event recorded after the
result columns' copy (:func:`vstream.transfer.to_host`).
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vstream.cascade.crops import crop_frame
from vstream.config.secondary import SecondaryConfig
from vstream.devices import same_device
from vstream.errors import ModelError, first_line
from vstream.frame import Frame
from vstream.inference.buckets import (
    Bucket,
    bucket_sizes,
    session_per_bucket,
    sessions_by_size,
)
from vstream.inference.providers import resolve_device, session_providers
from vstream.inference.secondary_spec import SecondarySpec, read_secondary_spec
from vstream.inference.wheels import load_onnxruntime
from vstream.preprocess.resample import Resampler
from vstream.transfer import HostStaging, to_host


@dataclass(frozen=True)
class SecondaryOutput:
    """A secondary model's result for ``N`` boxes, as host columns in box order."""

    label_ids: np.ndarray
    """``(N,)`` int64: the best label's index (a classifier's); -1 for an embedding."""
    scores: np.ndarray
    """``(N,)`` float32: the best label's probability (softmax, or its sigmoid with
    ``multi_label``); 1 for an embedding."""
    probabilities: np.ndarray | None
    """``(N, labels)`` float32, every label's probability (a classifier's), else None."""
    embeddings: np.ndarray | None
    """``(N, D)`` float32, each row of length 1 (an embedding's), else None."""

    def __len__(self) -> int:
        return len(self.label_ids)

    @classmethod
    def of_embeddings(cls, vectors: np.ndarray) -> SecondaryOutput:
        """An embedding model's result for ``vectors`` (``(N, D)`` unit rows): no label,
        score 1."""
        count = len(vectors)
        return cls(
            np.full(count, -1, dtype=np.int64),
            np.ones(count, dtype=np.float32),
            None,
            vectors.astype(np.float32, copy=False),
        )

    def readable(self) -> np.ndarray:
        """``(N,)`` bool: the rows that are a reading.

        A row holding NaN or infinity (a broken model, or one that overflowed) is
        not: its argmax would name the first label, counted and matched by the
        lines' filters. Nor is an embedding of zeros, which has no direction (the
        tracker takes it as no vector).
        """
        if self.embeddings is not None:
            return np.isfinite(self.embeddings).all(axis=1) & self.embeddings.any(axis=1)
        finite = np.isfinite(self.scores)
        if self.probabilities is not None:
            finite &= np.isfinite(self.probabilities).all(axis=1)
        return finite

    def take(self, rows: np.ndarray) -> SecondaryOutput:
        """The rows ``rows`` (indices or a mask) of every column."""
        return SecondaryOutput(
            self.label_ids[rows],
            self.scores[rows],
            None if self.probabilities is None else self.probabilities[rows],
            None if self.embeddings is None else self.embeddings[rows],
        )


class SecondaryModel:
    """One secondary model in ONNX Runtime with its crop batch and outputs bound by address.

    :meth:`select` says which detections it reads (``on.classes``, ``on.min_size``);
    :meth:`run` reads the given boxes of one frame. Calls are serialised (one
    set of buffers); the engine calls it from its postprocessing thread.
    """

    def __init__(
        self,
        config: SecondaryConfig,
        *,
        device: str | torch.device = "cpu",
        cuda_stream: Any = None,
        intra_op_threads: int = 1,
    ) -> None:
        """``cuda_stream`` is the pipeline's (``ModelSession.cuda_stream``) on CUDA; None
        on the CPU, or to run on torch's current stream."""
        ort = load_onnxruntime()
        path = Path(config.path)
        if not path.is_file():
            raise ModelError(f"secondary model file not found: {path}")
        self.config = config
        available = ort.get_available_providers()
        self.device = (
            device if isinstance(device, torch.device) else resolve_device(device, available)
        )
        self.cuda_stream = cuda_stream if self.device.type == "cuda" else None
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        handle = self.cuda_stream.cuda_stream if self.cuda_stream is not None else None
        providers = session_providers(self.device, None, available, stream=handle)
        self.session = self._open(ort, path, options, providers)
        """The session of the largest bucket (each bucket's own: :attr:`Bucket.session`)."""
        self.spec: SecondarySpec = read_secondary_spec(self.session, config)
        capacity = self.spec.batch  # within max_io_mib: checked before this allocation
        height, width = self.spec.input_size
        self.input = torch.empty(
            (capacity, 3, height, width), dtype=self.spec.input.torch_dtype, device=self.device
        )
        """``(max_batch, 3, h, w)``: every crop batch is written here, bound once."""
        self.output = torch.empty(
            (capacity, self.spec.output_size),
            dtype=self.spec.output.torch_dtype,
            device=self.device,
        )
        """``(max_batch, values)``: every run writes here, bound once."""
        sessions = sessions_by_size(
            bucket_sizes(capacity, self.spec.fixed_batch),
            self.session,
            lambda: self._open(ort, path, options, providers),
            session_per_bucket(self.device, ["cuda"]),
        )
        self.buckets = tuple(self._bucket(size, session) for size, session in sessions.items())
        self._scale, self._bias = self._normalisation()
        self._staging = HostStaging(pinned=self.device.type == "cuda")
        self._resampler = Resampler()
        """The crops' resampling plans, kept from frame to frame (used under ``_lock``)."""
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def labels(self) -> tuple[str, ...]:
        """A classifier's labels, one per output; empty for an embedding."""
        return self.spec.labels

    @property
    def max_batch(self) -> int:
        return self.input.shape[0]

    def _open(self, ort: Any, path: Path, options: Any, providers: list) -> Any:
        try:
            return ort.InferenceSession(str(path), sess_options=options, providers=providers)
        except Exception as exc:  # ONNX Runtime raises several unrelated types
            raise ModelError(f"cannot load secondary model {path}: {first_line(exc)}") from exc

    def _bucket(self, size: int, session: Any) -> Bucket:
        """``size`` crops bound in ``session`` (one per bucket on CUDA: see
        :func:`~vstream.inference.buckets.session_per_bucket`)."""
        ort = load_onnxruntime()
        binding = session.io_binding()
        index = self.device.index or 0
        for bind, name, tensor, dtype in (
            (binding.bind_input, self.spec.input.name, self.input[:size], self.spec.input),
            (binding.bind_output, self.spec.output.name, self.output[:size], self.spec.output),
        ):
            bind(
                name,
                self.device.type,
                index,
                dtype.numpy_dtype,
                tuple(tensor.shape),
                tensor.data_ptr(),
            )
        run_options = ort.RunOptions()
        if self.device.type == "cuda":
            # Queued on the pipeline's stream; what reads the output is queued behind it.
            run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return Bucket(
            size, self.input[:size], [self.output[:size]], binding, run_options, None, session
        )

    def _normalisation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel ``scale`` and ``bias`` taking 0..255 crops to the model's input values.

        ``(x / 255 * range - mean) / std`` as one multiply-add, made once.
        """
        spec = self.spec
        std = torch.tensor(spec.std, dtype=torch.float32)
        scale = spec.input_range / 255.0 / std
        bias = -torch.tensor(spec.mean, dtype=torch.float32) / std
        return scale.view(1, 3, 1, 1).to(self.device), bias.view(1, 3, 1, 1).to(self.device)

    # -- which objects ------------------------------------------------------------------------

    def select(self, boxes: np.ndarray, class_ids: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the detections this model reads (``on.classes``, ``on.min_size``).

        ``boxes`` are ``(N, 4)`` xyxy in frame pixels, ``class_ids`` ``(N,)``.
        """
        on = self.config.on
        keep = np.ones(len(boxes), dtype=bool)
        if on.classes is not None:
            keep &= np.isin(class_ids, on.classes)
        if on.min_size:
            sides = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
            keep &= sides >= on.min_size
        return keep

    # -- running ------------------------------------------------------------------------------

    def run(self, frame: Frame, boxes: np.ndarray | torch.Tensor) -> SecondaryOutput:
        """Read every box (``(N, 4)`` xyxy, frame pixels, on the host) of ``frame``: one row
        per box."""
        boxes = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4).cpu()
        if len(boxes) == 0:
            return self._empty()
        if not same_device(frame.device, self.device):
            raise ModelError(
                f"secondary model {self.name} runs on {self.device}; the frame is on {frame.device}"
            )
        stream = self.cuda_stream
        with self._lock, torch.cuda.stream(stream) if stream is not None else nullcontext():
            crops = crop_frame(
                frame,
                boxes,
                self.spec.input_size,
                crop=self.spec.crop,  # type: ignore[arg-type]
                resize=self.spec.resize,  # type: ignore[arg-type]
                rounding=self.spec.crop_round,  # type: ignore[arg-type]
                resampler=self._resampler,
            )
            results = [
                self._chunk(crops[start : start + self.max_batch])
                for start in range(0, len(crops), self.max_batch)
            ]
            columns = torch.cat(results) if len(results) > 1 else results[0]
            host = to_host(columns, self._staging)
        return self._columns(np.array(host))  # a copy: the staging buffer is reused

    def _chunk(self, crops: torch.Tensor) -> torch.Tensor:
        """Normalise ``crops`` into their slots, run the smallest bucket that holds them,
        and return the result columns (a new tensor: the output buffer is reused)."""
        count = len(crops)
        bucket = next(b for b in self.buckets if b.size >= count)
        crops.mul_(self._scale).add_(self._bias)
        self.input[:count].copy_(crops)
        try:
            bucket.session.run_with_iobinding(bucket.binding, bucket.run_options)
        except Exception as exc:
            raise ModelError(f"secondary model {self.name}: {first_line(exc)}") from exc
        values = self.output[:count]
        if self.spec.outputs == "embedding":
            return torch.nn.functional.normalize(values.float(), dim=1)
        if self.spec.outputs == "logits":
            values = values.float()
            return values.sigmoid() if self.config.multi_label else values.softmax(dim=1)
        # Probabilities as the model gave them: copied, since the next chunk's run overwrites
        # the buffer before the chunks are joined (float32's .float() would be a view of it).
        return values.to(torch.float32, copy=True)

    def _columns(self, values: np.ndarray) -> SecondaryOutput:
        count = len(values)
        if self.spec.outputs == "embedding":
            return SecondaryOutput.of_embeddings(values)
        best = values.argmax(axis=1)
        scores = values[np.arange(count), best].astype(np.float32)
        return SecondaryOutput(best.astype(np.int64), scores, values, None)

    def _empty(self) -> SecondaryOutput:
        width = self.spec.output_size
        return self._columns(np.zeros((0, width), dtype=np.float32))


__all__ = ["SecondaryModel", "SecondaryOutput"]
