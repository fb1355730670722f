"""ONNX Runtime inference with IO binding: bind once, run many times.

The engine owns the model's input tensor and its output tensors. Both are
allocated once on the pipeline's device and bound to ONNX Runtime by address,
so a run reads the preprocessed frames where preprocessing wrote them and
writes detections where postprocessing reads them: nothing is copied, and
the addresses never change between runs (what CUDA graphs require).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vstream.errors import ModelError
from vstream.inference.model import ModelSpec, infer_output_shapes, read_model_spec
from vstream.inference.providers import ProviderChoice, resolve_device, session_providers
from vstream.inference.runtime import load_onnxruntime

log = logging.getLogger("vstream")

DEFAULT_IMGSZ = 640


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _input_size(spec: ModelSpec, imgsz: int | tuple[int, int] | None) -> tuple[int, int]:
    """The ``(height, width)`` the model runs at: fixed by the model, asked for, or a default."""
    requested = (imgsz, imgsz) if isinstance(imgsz, int) else imgsz
    fixed = spec.fixed_input_size
    if fixed is not None:
        if requested is not None and tuple(requested) != fixed:
            raise ModelError(
                f"{spec.path.name} takes a fixed {fixed[1]}x{fixed[0]} input; "
                f"imgsz {requested[1]}x{requested[0]} does not fit (leave imgsz unset)"
            )
        return fixed
    size = requested or spec.metadata_imgsz or (DEFAULT_IMGSZ, DEFAULT_IMGSZ)
    stride = spec.stride
    if any(s <= 0 or s % stride for s in size):
        raise ModelError(
            f"imgsz {list(size)} must be positive multiples of the model stride {stride}"
        )
    return size[0], size[1]


def _batch_size(spec: ModelSpec, requested: int | None) -> int:
    """The batch the engine runs: as asked, else the model's fixed batch, else 1."""
    if requested is None:
        return spec.fixed_batch or 1
    if requested < 1:
        raise ModelError(f"batch size must be at least 1, got {requested}")
    fixed = spec.fixed_batch
    if fixed is not None and fixed != requested:
        raise ModelError(
            f"{spec.path.name} has a fixed batch of {fixed}; batch size {requested} does not fit"
        )
    return requested


class InferenceEngine:
    """A detector model in ONNX Runtime, with its input and outputs bound by address."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "auto",
        batch_size: int | None = None,
        imgsz: int | tuple[int, int] | None = None,
        providers: Sequence[ProviderChoice] | None = None,
        intra_op_threads: int = 0,
    ) -> None:
        ort = load_onnxruntime()
        path = Path(model_path)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}")
        available = ort.get_available_providers()
        self.device = resolve_device(device, available)
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(
                str(path),
                sess_options=options,
                providers=session_providers(self.device, providers, available),
            )
        except Exception as exc:  # ONNX Runtime raises several unrelated types
            raise ModelError(f"cannot load model {path}: {_first_line(exc)}") from exc
        self.spec = read_model_spec(self.session, path)
        height, width = _input_size(self.spec, imgsz)
        batch = _batch_size(self.spec, batch_size)

        self.input = torch.empty(
            (batch, 3, height, width), dtype=self.spec.input.torch_dtype, device=self.device
        )
        """The persistent model input; preprocessing writes into it in place."""
        self.binding = self.session.io_binding()
        self._bind(self.spec.input.name, self.input, is_input=True)

        shapes = self._output_shapes(tuple(self.input.shape))
        self.outputs: list[torch.Tensor | None] = []
        """Preallocated outputs in model order; None where the size is only known per run."""
        for out in self.spec.outputs:
            shape = shapes[out.name]
            if shape is None:
                self.binding.bind_output(out.name, self.device.type, self.device.index or 0)
                self.outputs.append(None)
            else:
                tensor = torch.empty(shape, dtype=out.torch_dtype, device=self.device)
                self._bind(out.name, tensor, is_input=False)
                self.outputs.append(tensor)

    @property
    def batch_size(self) -> int:
        return self.input.shape[0]

    @property
    def input_size(self) -> tuple[int, int]:
        """``(height, width)`` of the model input."""
        return self.input.shape[2], self.input.shape[3]

    def _bind(self, name: str, tensor: torch.Tensor, *, is_input: bool) -> None:
        bind = self.binding.bind_input if is_input else self.binding.bind_output
        bind(
            name,
            self.device.type,
            self.device.index or 0,
            self.spec.input.numpy_dtype if is_input else self._numpy_dtype(name),
            tuple(tensor.shape),
            tensor.data_ptr(),
        )

    def _numpy_dtype(self, output_name: str) -> Any:
        return next(o.numpy_dtype for o in self.spec.outputs if o.name == output_name)

    def _output_shapes(self, input_shape: tuple[int, ...]) -> dict[str, tuple[int, ...] | None]:
        """Static output shapes: from the model, its symbolic input dims, or shape inference."""
        symbols = {
            dim: size
            for dim, size in zip(self.spec.input.shape, input_shape, strict=True)
            if isinstance(dim, str)
        }
        shapes: dict[str, tuple[int, ...] | None] = {}
        inferred: dict[str, Any] | None = None
        for out in self.spec.outputs:
            dims = tuple(symbols.get(d, d) if isinstance(d, str) else d for d in out.shape)
            if not all(isinstance(d, int) and d > 0 for d in dims):
                if inferred is None:
                    inferred = infer_output_shapes(
                        self.spec.path, self.spec.input.name, input_shape
                    )
                dims = inferred.get(out.name, dims)
            shapes[out.name] = dims if all(isinstance(d, int) and d > 0 for d in dims) else None
        return shapes

    def run(self) -> list[torch.Tensor]:
        """Run the model on the current content of :attr:`input`; return the outputs.

        Preallocated outputs are returned as the same tensors every time; outputs
        whose size is only known per run are adopted from ONNX Runtime through
        DLPack, without a copy.
        """
        if self.device.type == "cuda" and not torch.cuda.current_stream(self.device).cuda_stream:
            # ONNX Runtime runs on its own stream: make the preprocessing visible to it.
            torch.cuda.current_stream(self.device).synchronize()
        try:
            self.session.run_with_iobinding(self.binding)
        except Exception as exc:
            raise ModelError(f"inference failed: {_first_line(exc)}") from exc
        if all(t is not None for t in self.outputs):
            return self.outputs  # type: ignore[return-value]
        produced = self.binding.get_outputs()
        return [
            t if t is not None else torch.from_dlpack(produced[i])
            for i, t in enumerate(self.outputs)
        ]
