"""ONNX Runtime inference with IO binding: bind once, run many times.

A :class:`ModelSession` owns the model's input tensors and its output tensors. All are
allocated once on the pipeline's device and bound to ONNX Runtime by address,
so a run reads the preprocessed frames where preprocessing wrote them and
writes detections where postprocessing reads them: nothing is copied, and
the addresses never change between runs (what CUDA graphs require). Each
batch size the engine runs (its buckets, see :mod:`vstream.inference.buckets`)
has its own binding, and with the CUDA provider's ``enable_cuda_graph`` each
bucket is replayed as its own graph, selected by the ``gpu_graph_id`` run
option.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from vstream.config.model import ModelConfig, RuntimeOptions
from vstream.errors import ModelError
from vstream.inference.buckets import BatchBuffer, Bucket, bucket_sizes
from vstream.inference.model import (
    batch_size,
    infer_output_shapes,
    input_size,
    read_model_spec,
)
from vstream.inference.providers import (
    ProviderChoice,
    cuda_graphs_enabled,
    resolve_device,
    session_providers,
)
from vstream.inference.wheels import load_onnxruntime

log = logging.getLogger("vstream")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class ModelSession:
    """A detector model in ONNX Runtime, with its inputs and outputs bound by address.

    ``runtime.in_flight`` sets how many batches can be in flight at once (one
    being preprocessed, one in the model, one in postprocessing); each has a
    buffer of its own: its own input and, per batch bucket, its own outputs
    and IO binding. ``model.spin_wait`` lets ONNX Runtime's threads spin
    between parallel sections: fastest when the model has the CPU to itself,
    wasteful when decoding and preprocessing run beside it on the same cores.
    """

    def __init__(self, model: ModelConfig, runtime: RuntimeOptions) -> None:
        ort = load_onnxruntime()
        path = Path(model.path)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}")
        available = ort.get_available_providers()
        self.device = resolve_device(runtime.device, available)
        providers = [
            ProviderChoice(p.name, {k: str(v) for k, v in p.options.items()})
            for p in model.providers or ()
        ] or None
        self.cuda_stream = (
            torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        )
        """The torch stream ONNX Runtime was given (when not the default): stages use it too."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = model.intra_op_threads
        options.log_severity_level = 3
        if not model.spin_wait:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(
                str(path),
                sess_options=options,
                providers=session_providers(self.device, providers, available),
            )
        except Exception as exc:  # ONNX Runtime raises several unrelated types
            raise ModelError(f"cannot load model {path}: {_first_line(exc)}") from exc
        self.spec = read_model_spec(self.session, path)
        height, width = input_size(self.spec, model.imgsz)
        sizes = bucket_sizes(batch_size(self.spec, runtime.batch_size), self.spec.fixed_batch)
        self.cuda_graphs = cuda_graphs_enabled(self.device, providers)
        """Whether every bucket runs as its own CUDA graph (``gpu_graph_id``)."""
        self._shapes = {size: self._output_shapes((size, 3, height, width)) for size in sizes}
        if self.cuda_graphs and any(None in s.values() for s in self._shapes.values()):
            raise ModelError(
                f"{path.name}: CUDA graphs need outputs whose size is known before the run"
            )
        self.buffers = tuple(
            self._buffer(i, sizes, (height, width)) for i in range(runtime.in_flight)
        )
        """Persistent inputs, outputs and bindings, created once; see :class:`BatchBuffer`."""

    @property
    def input(self) -> torch.Tensor:
        """The model input of the first buffer; preprocessing writes into it in place."""
        return self.buffers[0].input

    @property
    def outputs(self) -> list[torch.Tensor | None]:
        """Preallocated outputs of the first buffer's full batch; None where only known per run."""
        return self.buffers[0].largest.outputs

    @property
    def binding(self) -> Any:
        """The IO binding of the first buffer's full batch."""
        return self.buffers[0].largest.binding

    @property
    def bucket_sizes(self) -> tuple[int, ...]:
        return tuple(b.size for b in self.buffers[0].buckets)

    @property
    def batch_size(self) -> int:
        return self.input.shape[0]

    @property
    def input_size(self) -> tuple[int, int]:
        """``(height, width)`` of the model input."""
        return self.input.shape[2], self.input.shape[3]

    def _buffer(self, index: int, sizes: tuple[int, ...], size: tuple[int, int]) -> BatchBuffer:
        """One buffer: the input of the largest batch, then its buckets, largest first.

        A smaller bucket's outputs are views of the largest one's where the
        model's first output dimension is the batch, so a buffer holds one
        copy of each output whatever its number of buckets.
        """
        full_input = torch.empty(
            (sizes[-1], 3, *size), dtype=self.spec.input.torch_dtype, device=self.device
        )
        buckets: list[Bucket] = []
        for position in reversed(range(len(sizes))):
            graph_id = index * len(sizes) + position if self.cuda_graphs else None
            largest = buckets[0].outputs if buckets else None
            buckets.insert(0, self._bucket(full_input, sizes[position], graph_id, largest))
        return BatchBuffer(full_input, tuple(buckets))

    def _bucket(
        self,
        full_input: torch.Tensor,
        size: int,
        graph_id: int | None,
        largest: list[torch.Tensor | None] | None,
    ) -> Bucket:
        ort = load_onnxruntime()
        binding = self.session.io_binding()
        view = full_input[:size]
        self._bind(binding, self.spec.input.name, view, self.spec.input.numpy_dtype)
        outputs: list[torch.Tensor | None] = []
        for position, out in enumerate(self.spec.outputs):
            shape = self._shapes[size][out.name]
            if shape is None:
                binding.bind_output(out.name, self.device.type, self.device.index or 0)
                outputs.append(None)
                continue
            full = largest[position] if largest is not None else None
            if full is not None and shape == (size, *full.shape[1:]):
                tensor = full[:size]
            else:
                tensor = torch.empty(shape, dtype=out.torch_dtype, device=self.device)
            self._bind(binding, out.name, tensor, out.numpy_dtype)
            outputs.append(tensor)
        run_options = ort.RunOptions()
        if graph_id is not None:
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return Bucket(size, view, outputs, binding, run_options, graph_id)

    def _bind(self, binding: Any, name: str, tensor: torch.Tensor, dtype: Any) -> None:
        bind = binding.bind_input if name == self.spec.input.name else binding.bind_output
        bind(
            name,
            self.device.type,
            self.device.index or 0,
            dtype,
            tuple(tensor.shape),
            tensor.data_ptr(),
        )

    def _output_shapes(self, input_shape: tuple[int, ...]) -> dict[str, tuple[int, ...] | None]:
        """Static output shapes: from the model, its symbolic input dims, or shape inference.

        Each dimension is taken from whichever source knows it: shape inference
        may size a dimension the model leaves symbolic and still echo a
        declared symbol (``batch``) for another one, which the input resolves.
        """
        symbols = {
            dim: size
            for dim, size in zip(self.spec.input.shape, input_shape, strict=True)
            if isinstance(dim, str)
        }

        def resolve(dim: Any) -> Any:
            return symbols.get(dim, dim) if isinstance(dim, str) else dim

        shapes: dict[str, tuple[int, ...] | None] = {}
        inferred: dict[str, Any] | None = None
        for out in self.spec.outputs:
            dims = tuple(resolve(d) for d in out.shape)
            if not all(isinstance(d, int) and d > 0 for d in dims):
                if inferred is None:
                    inferred = infer_output_shapes(
                        self.spec.path, self.spec.input.name, input_shape
                    )
                found = inferred.get(out.name)
                if found is not None and len(found) == len(dims):
                    dims = tuple(
                        d if isinstance(d, int) and d > 0 else resolve(f)
                        for d, f in zip(dims, found, strict=True)
                    )
            shapes[out.name] = dims if all(isinstance(d, int) and d > 0 for d in dims) else None
        return shapes

    def run(self, bucket: Bucket | None = None) -> list[torch.Tensor]:
        """Run ``bucket`` (default: the first buffer's full batch) on its input's current content.

        Preallocated outputs are returned as the same tensors every time; outputs
        whose size is only known per run are adopted from ONNX Runtime through
        DLPack, without a copy.
        """
        if bucket is None:
            bucket = self.buffers[0].largest
        if self.device.type == "cuda" and not torch.cuda.current_stream(self.device).cuda_stream:
            # ONNX Runtime runs on its own stream: make the preprocessing visible to it.
            torch.cuda.current_stream(self.device).synchronize()
        try:
            self.session.run_with_iobinding(bucket.binding, bucket.run_options)
        except Exception as exc:
            raise ModelError(f"inference failed: {_first_line(exc)}") from exc
        if all(t is not None for t in bucket.outputs):
            return bucket.outputs  # type: ignore[return-value]
        produced = bucket.binding.get_outputs()
        return [
            t if t is not None else torch.from_dlpack(produced[i])
            for i, t in enumerate(bucket.outputs)
        ]
