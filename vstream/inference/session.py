"""ONNX Runtime inference with IO binding: bind once, run many times, on the pipeline's stream.

A :class:`ModelSession` owns the model's input tensors and its output tensors. All are
allocated once on the pipeline's device and bound to ONNX Runtime by address,
so a run reads the preprocessed frames where preprocessing wrote them and
writes detections where postprocessing reads them: nothing is copied, and
the addresses never change between runs (what CUDA graphs require). Each
batch size the engine runs (its buckets, see :mod:`vstream.inference.buckets`)
has its own binding and, on CUDA, its own session.

The stream model (CUDA)
-----------------------

This is the one place the GPU ordering of vstream is written down. vstream
creates one CUDA stream per pipeline (:attr:`ModelSession.cuda_stream`, see
:func:`vstream.inference.providers.pipeline_stream`) and every piece of GPU
work of the pipeline is queued on it, in the order the data flows, so the GPU
itself keeps the order and no thread waits for it::

    reader thread      NVDEC Decode (cudastream=S) -> copy into a FrameRing buffer  -.
                       or: CPU decode -> pinned host buffer -> async upload          |
    preprocess thread  letterbox each frame into its slot of the batch input         |  one
    inference thread   ORT run on S (user_compute_stream=S; the run returns at       |  stream S,
                       once: disable_synchronize_execution_providers)                |  in queue
    postprocess thread threshold -> NMS -> cap -> map back -> copy (M, 7) rows       |  order
                       into pinned host memory, record event E on S                 -'
                       host waits on E, then rows -> records -> sinks

    host waits per batch, all on the postprocess thread: the number of candidates
    (nonzero), NMS's kept count, rarely the max_det cap (each counted in
    vstream.transfer.transfers.implicit_syncs), and E (transfers.host_waits).
    Nowhere else (with CUDA graphs, ORT's own wait after each replay, below):
    no stream or device synchronisation, no .item() in the loop.

- The reader thread, the three stage threads and ORT all queue on S; queue
  order on one stream is execution order, so no event is needed between them.
- NVDEC writes a surface and vstream copies it out on S, so the decoder's
  next write into that surface is queued after the copy, and a ring buffer is
  reused only once no frame refers to it, i.e. after every read of it was
  queued (:mod:`vstream.decoders.nvdec`).
- The letterbox writes the model input on S before the batch is handed to
  the inference thread, which queues the model after it on S.
- ONNX Runtime runs on S and returns without synchronising (the
  ``disable_synchronize_execution_providers`` run option makes its
  ``Run`` skip the stream synchronisation at the end): postprocessing is
  queued behind it on S.
- :func:`vstream.transfer.to_host` copies only the detections tensor into a
  pinned buffer and waits on an event recorded right after that copy: the
  host waits for this batch's work, never for the whole device.
- A caller on another stream (``Detector.detect`` from a user's thread) is
  ordered by events: S waits for the caller's stream before the run, the
  caller's stream waits for S after it (:meth:`ModelSession._ordered`).
- S is a *blocking* stream, so work a thread queues on the legacy default
  stream (a library that knows no streams, a preview drawn on another
  thread) stays ordered with it too.
- Stage clocks on the host measure launches for the preprocess and
  inference stages; the postprocess stage includes the wait for the batch,
  so their sum is the batch's real latency. What each stage costs on the GPU
  alone is measured with the device synchronised (``vstream doctor``).

Concurrent runs (several batches in the model at once) are for the CPU,
where each run takes its own cores. ONNX Runtime's CUDA provider has one
compute stream per session (``user_compute_stream``, or its own), so runs of
one session on CUDA cannot overlap on the GPU: the run plan
(:mod:`vstream.inference.plan`) gives one run there, and runs are serialised.

CUDA graphs
-----------

With the CUDA provider's ``enable_cuda_graph``, every bucket of every buffer
is its own graph (``gpu_graph_id``). ONNX Runtime keeps captured graphs per
host thread and captures in global mode, where a CUDA call from any other
thread breaks the capture; so each session with graphs gets one model thread
that does all its runs, and every graph is captured there when the session is
built, before any stage or reader thread of the pipeline exists (the first
run of a graph id makes ORT's warm-up runs and the capture). Afterwards runs
only replay. A model that cannot be captured is refused with one line.

One host wait comes with graphs and cannot be turned off from here: ORT's
CUDA provider synchronises the stream after every replay
(``CUDAGraphManager::Replay`` in ``cuda_graph.cc``: ``cudaGraphLaunch``, then
``cudaStreamSynchronize``; the replay short-cuts ``Run`` before the
``disable_synchronize_execution_providers`` option is read). So with graphs
the model thread waits for each run; each such wait is counted as
``graph_replay``. Graphs pay where launching kernels, not the GPU, limits a
run (small models, small batches); ``vstream doctor`` times both.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from vstream.config.model import ModelConfig, RuntimeOptions, provider_chain, tensorrt_cache
from vstream.errors import ModelError, first_line
from vstream.inference.buckets import (
    BatchBuffer,
    Bucket,
    bucket_sizes,
    session_per_bucket,
    sessions_by_size,
)
from vstream.inference.model import (
    ModelSpec,
    batch_size,
    check_detector_budget,
    input_size,
    open_for_inspection,
    output_shapes,
    read_model_spec,
)
from vstream.inference.providers import (
    PROVIDER_NAMES,
    PROVIDER_TITLES,
    TENSORRT_EXTRA,
    ProviderChoice,
    cuda_graphs_enabled,
    load_tensorrt,
    pipeline_stream,
    provider_load_error,
    resolve_device,
    session_providers,
    tensorrt_options,
)
from vstream.inference.wheels import load_onnxruntime
from vstream.transfer import transfers

log = logging.getLogger("vstream")

EAGER_GRAPH_ID = "-1"
"""``gpu_graph_id`` that makes ONNX Runtime run without capturing or replaying a graph."""


def run_shapes(
    spec: ModelSpec, imgsz: int | tuple[int, int] | None, batch: int | None, device: str
) -> tuple[tuple[int, ...], tuple[int, int]]:
    """The batch buckets and the ``(height, width)`` a session of ``spec`` runs on ``device``."""
    sizes = bucket_sizes(batch_size(spec, batch, device), spec.fixed_batch)
    return sizes, input_size(spec, imgsz)


class ModelThread:
    """The one host thread that runs every model run of a session with CUDA graphs.

    ONNX Runtime's CUDA provider keeps captured graphs in a per-thread
    context and captures on a run's own thread; runs from any other thread
    would capture again, while other threads work. Calls are served in order;
    a call's exception is raised in the caller.
    """

    def __init__(self, name: str) -> None:
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"model-{name}", daemon=True)
        self.thread.start()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        if threading.current_thread() is self.thread:
            return function(*args)
        done = threading.Event()
        box: dict[str, Any] = {}
        self._requests.put((function, args, done, box))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            function, args, done, box = request
            del request  # hold nothing between calls: the session must stay collectable
            try:
                box["value"] = function(*args)
            except BaseException as exc:  # handed to the caller
                box["error"] = exc
            finally:
                del function, args
                done.set()

    def close(self) -> None:
        self._requests.put(None)


class ModelSession:
    """A detector model in ONNX Runtime, with its inputs and outputs bound by address.

    ``runtime.in_flight`` sets how many batches can be in flight at once (one
    being preprocessed, one in the model, one in postprocessing); each has a
    buffer of its own: its own input and, per batch bucket, its own outputs
    and IO binding. ``model.spin_wait`` lets ONNX Runtime's threads spin
    between parallel sections: fastest when the model has the CPU to itself,
    wasteful when decoding and preprocessing run beside it on the same cores.

    :meth:`run` may be called from several threads at once, each on its own
    buffer (as many as the run plan has in flight; on CUDA they are serialised).
    """

    def __init__(self, model: ModelConfig, runtime: RuntimeOptions) -> None:
        ort = load_onnxruntime()
        path = Path(model.path)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}")
        available = ort.get_available_providers()
        self.device = resolve_device(runtime.device, available)
        providers = self._providers(ort, path, model, runtime, available)
        self.cuda_graphs = cuda_graphs_enabled(self.device, providers)
        """Whether every bucket runs as its own CUDA graph (``gpu_graph_id``)."""
        self.cuda_stream = self._pipeline_stream(providers)
        """The pipeline's CUDA stream (None on the CPU): ORT, the stages and NVDEC all use it."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = model.intra_op_threads
        options.log_severity_level = 3
        if not model.spin_wait:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        stream = self.cuda_stream.cuda_stream if self.cuda_stream is not None else None
        arguments = {
            "sess_options": options,
            "providers": session_providers(self.device, providers, available, stream=stream),
            # ORT's Python retries a session that fails to start on its fallback providers
            # with none of the options given (no device_id, no user_compute_stream), and
            # says so on stdout only: a session vstream did not ask for. Refused instead.
            "enable_fallback": 0,
        }
        self.session = self._open(ort, path, providers, arguments)
        """The session of the largest bucket (each bucket's own: :attr:`Bucket.session`)."""
        if self.device.type == "cuda":
            self._check_gpu_provider(ort, path, providers)
        self.spec = read_model_spec(self.session, path)
        sizes, (height, width) = run_shapes(
            self.spec, model.imgsz, runtime.batch_size, self.device.type
        )
        self._shapes = {size: output_shapes(self.spec, (size, 3, height, width)) for size in sizes}
        check_detector_budget(
            self.spec, (sizes[-1], 3, height, width), self._shapes[sizes[-1]], model.max_io_mib
        )
        if self.cuda_graphs and any(None in s.values() for s in self._shapes.values()):
            raise ModelError(
                f"{path.name}: CUDA graphs need outputs whose size is known before the run"
            )
        self._size_inputs: list[torch.Tensor] = []
        """The bound ``orig_target_sizes`` tensors: ORT holds only their addresses."""
        self._sessions = sessions_by_size(
            sizes,
            self.session,
            lambda: self._open(ort, path, providers, arguments),
            session_per_bucket(self.device, [c.name for c in providers or ()]),
        )
        """The session of each batch size: one for all, or on CUDA one each (see
        :func:`~vstream.inference.buckets.session_per_bucket`)."""
        self.buffers = tuple(
            self._buffer(i, sizes, (height, width)) for i in range(runtime.in_flight)
        )
        """Persistent inputs, outputs and bindings, created once; see :class:`BatchBuffer`."""
        self._gpu_lock = threading.Lock() if self.device.type == "cuda" else None
        self._model_thread: ModelThread | None = None
        if self.cuda_graphs:
            self._model_thread = ModelThread(path.stem)
            weakref.finalize(self, self._model_thread.close)
            self._capture_graphs(path)
        elif self.device.type == "cuda":
            self._warm_buckets()

    def _open(
        self, ort: Any, path: Path, providers: list[ProviderChoice] | None, arguments: dict
    ) -> Any:
        """An ``InferenceSession`` of the model at ``path``; a failure is one line."""
        try:
            return ort.InferenceSession(str(path), **arguments)
        except Exception as exc:  # ONNX Runtime raises several unrelated types
            # ORT refuses graphs at load ("This session cannot use the CUDA Graph feature as
            # requested by the user as ..."): control flow, nodes left on the CPU.
            if self.cuda_graphs and ("cuda graph" in str(exc).lower() or "capture" in str(exc)):
                raise ModelError(self._no_graphs(path, exc)) from exc
            # Without its libraries, ORT's TensorRT provider fails the session: "Please install
            # TensorRT libraries ...", which does not say which one.
            tensorrt = self.device.type == "cuda" and any(
                c.name == "tensorrt" for c in providers or ()
            )
            missing = provider_load_error(ort, "tensorrt") if tensorrt else None
            if missing is not None:
                raise ModelError(self._no_tensorrt_libraries(path, missing)) from exc
            raise ModelError(f"cannot load model {path}: {first_line(exc)}") from exc

    def _warm_buckets(self) -> None:
        """Run every bucket once now, so that no batch size meets its first run live.

        ONNX Runtime's CUDA provider searches cuDNN's algorithms and builds each
        convolution's plan at a session's first run of a shape: met live, a
        part-filled batch of a new size would stall the pipeline while a live
        stream's queue fills. Buffers share their buckets' sessions, so one
        buffer's buckets warm them all. (On an H200, one file stream of the demo
        detector: 148 frames/s without, 166 with.)
        """
        stream = self.cuda_stream
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for bucket in self.buffers[0].buckets:
                bucket.input.zero_()  # ordered before the run on the pipeline's stream
                self.run(bucket)
        if stream is not None:
            stream.synchronize()

    def _providers(
        self,
        ort: Any,
        path: Path,
        model: ModelConfig,
        runtime: RuntimeOptions,
        available: list[str],
    ) -> list[ProviderChoice] | None:
        """The execution providers to ask for (``runtime.provider``, ``model.providers``),
        TensorRT's with its options made for this model (None: the default).

        TensorRT asked for on CUDA must run: a wheel without its provider, or
        its libraries missing, is one line naming what to install, before ONNX
        Runtime would quietly go on with CUDA alone.
        """
        try:
            chain = provider_chain(model.providers, runtime.provider)
        except ValueError as exc:
            raise ModelError(str(exc)) from None
        choices = [
            ProviderChoice(p.name, {k: str(v) for k, v in p.options.items()}) for p in chain or ()
        ]
        if runtime.provider != "auto" and self.device.type == "cpu":
            log.warning("runtime.provider %s has no effect on cpu", runtime.provider)
        position = next((i for i, c in enumerate(choices) if c.name == "tensorrt"), None)
        if self.device.type != "cuda" or position is None:
            return choices or None
        if PROVIDER_NAMES["tensorrt"] not in available:
            raise ModelError(
                f"{path.name}: TensorRT was asked for, but this onnxruntime {ort.__version__} "
                "has no TensorRT provider: install onnxruntime-gpu (pip install 'vstream[gpu]')"
            )
        problem = load_tensorrt()
        if problem is not None:
            raise ModelError(self._no_tensorrt_libraries(path, problem))
        # Its shape profiles need the model's input before the session exists.
        spec = read_model_spec(open_for_inspection(path, "model"), path)
        sizes, size = run_shapes(spec, model.imgsz, runtime.batch_size, self.device.type)
        cache = tensorrt_cache(runtime.tensorrt_cache)
        given = choices[position].options
        choices[position] = ProviderChoice(
            "tensorrt", tensorrt_options(spec, sizes, size, cache, given)
        )
        return choices

    def _no_tensorrt_libraries(self, path: Path, why: str) -> str:
        return (
            f"{path.name}: TensorRT was asked for, but its libraries do not load here ({why}): "
            f"{TENSORRT_EXTRA}, or set runtime.provider: cuda"
        )

    def _check_gpu_provider(
        self, ort: Any, path: Path, providers: list[ProviderChoice] | None
    ) -> None:
        """Refuse a CUDA session that ONNX Runtime quietly built on another provider, with one line.

        ``get_available_providers()`` lists what the wheel was built with, also
        when a provider's libraries then fail to load (no cuDNN, a wheel of
        another CUDA major than the libraries installed, no TensorRT): ONNX
        Runtime logs a warning and makes the session with the providers left,
        to which vstream would bind CUDA pointers (the CPU), failing every
        batch, or which are not what was asked for (CUDA for TensorRT).
        Refused rather than moved: the pipeline, its plan and its buffers were
        made for the provider asked for, and a GPU deployment quietly running
        on something else is a broken install to fix, not a mode to run in
        (``runtime.device: cpu`` says so explicitly).
        """
        wanted = next((c.name for c in providers or () if c.name != "cpu"), "cuda")
        running = list(self.session.get_providers())
        if running and running[0] == PROVIDER_NAMES[wanted]:
            return
        why = provider_load_error(ort, wanted) or (
            "its library loads; ONNX Runtime's own warning above says why it did not start"
        )
        remedy = (
            f"{TENSORRT_EXTRA}, or set runtime.provider: cuda"
            if wanted == "tensorrt"
            else "install the matching wheels (README, 'The GPU path') or set runtime.device: cpu"
        )
        raise ModelError(
            f"{path.name}: ONNX Runtime did not start its {PROVIDER_TITLES[wanted]} provider on "
            f"{self.device} ({why}), the session would run on {', '.join(running)}: {remedy}"
        )

    # -- the stream ----------------------------------------------------------------------------

    def _pipeline_stream(self, providers: list[ProviderChoice] | None) -> Any:
        """A CUDA stream of the pipeline's own, or the one the user gave ONNX Runtime."""
        if self.device.type != "cuda":
            return None
        given = next(
            (
                c.options["user_compute_stream"]
                for c in providers or ()
                if c.name in ("cuda", "tensorrt") and c.options.get("user_compute_stream")
            ),
            None,
        )
        return pipeline_stream(self.device, int(given) if given else None)

    @contextlib.contextmanager
    def _ordered(self) -> Iterator[None]:
        """Order a run after the caller's stream, and the caller's stream after the run.

        Stage threads already run on :attr:`cuda_stream`: no event at all.
        """
        stream = self.cuda_stream
        caller = torch.cuda.current_stream(self.device) if stream is not None else None
        if caller is None or caller == stream:
            yield
            return
        inputs_ready = torch.cuda.Event()
        inputs_ready.record(caller)
        stream.wait_event(inputs_ready)
        yield
        outputs_ready = torch.cuda.Event()
        outputs_ready.record(stream)
        caller.wait_event(outputs_ready)

    # -- graphs --------------------------------------------------------------------------------

    def _no_graphs(self, path: Path, exc: BaseException) -> str:
        return (
            f"{path.name}: CUDA graphs cannot capture this model ({first_line(exc)}); "
            "run it without enable_cuda_graph"
        )

    def _capture_graphs(self, path: Path) -> None:
        """Capture every bucket of every buffer once, on the model thread, now.

        ONNX Runtime's first run of a ``gpu_graph_id`` makes its regular
        runs, captures and replays; the inputs hold the letterbox grey so
        the warm-up computes on sane numbers.
        """
        stream = self.cuda_stream
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for buffer in self.buffers:
                buffer.input.fill_(114 / 255)
        if stream is not None:
            stream.synchronize()  # once, at build: nothing of ours is pending when capture begins
        try:
            for buffer in self.buffers:
                for bucket in buffer.buckets:
                    self._call(self._run_bound, bucket, bucket.run_options)
            if self.cuda_stream is not None:
                self.cuda_stream.synchronize()  # once, at build time: surface capture errors
        except Exception as exc:
            raise ModelError(self._no_graphs(path, exc)) from exc
        log.debug(
            "%s: %d CUDA graphs captured", path.name, sum(len(b.buckets) for b in self.buffers)
        )

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        if self._model_thread is None:
            return function(*args)
        return self._model_thread.call(function, *args)

    def _run_bound(self, bucket: Bucket, run_options: Any) -> None:
        bucket.session.run_with_iobinding(bucket.binding, run_options)

    # -- buffers -------------------------------------------------------------------------------

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

    @property
    def providers(self) -> list[str]:
        """The execution providers ONNX Runtime really uses, in order (``get_providers()``)."""
        return list(self.session.get_providers())

    def _buffer(self, index: int, sizes: tuple[int, ...], size: tuple[int, int]) -> BatchBuffer:
        """One buffer: the input of the largest batch, then its buckets, largest first.

        A smaller bucket's outputs are views of the largest one's where the
        model's first output dimension is the batch, so a buffer holds one
        copy of each output whatever its number of buckets.
        """
        # Zeros, once: a partial batch leaves slots the model still reads, and uninitialised
        # memory there can hold NaN, which a model that mixes the batch (a fixed-batch export
        # reducing over it) spreads to the real frames' outputs.
        full_input = torch.zeros(
            (sizes[-1], 3, *size), dtype=self.spec.input.torch_dtype, device=self.device
        )
        size_inputs = [self._size_input(spec, sizes[-1], size) for spec in self.spec.size_inputs]
        self._size_inputs += size_inputs
        buckets: list[Bucket] = []
        for position in reversed(range(len(sizes))):
            graph_id = index * len(sizes) + position if self.cuda_graphs else None
            largest = buckets[0].outputs if buckets else None
            buckets.insert(
                0, self._bucket(full_input, size_inputs, sizes[position], graph_id, largest)
            )
        return BatchBuffer(full_input, tuple(buckets))

    def _size_input(self, spec: Any, batch: int, size: tuple[int, int]) -> torch.Tensor:
        """``orig_target_sizes``: (width, height) of the model input for every slot, made once.

        DETR exports scale their normalised boxes by it. The original exports
        want each frame's own size there, which changes per frame; vstream
        gives the input's size instead, so the input is bound once and the
        boxes come out in input pixels, then go back through the letterbox or
        stretch like every other family's (:mod:`vstream.postprocess.decode`).
        """
        height, width = size
        host = torch.tensor([[width, height]] * batch, dtype=spec.torch_dtype)
        return host.to(self.device)

    def _bucket(
        self,
        full_input: torch.Tensor,
        size_inputs: list[torch.Tensor],
        size: int,
        graph_id: int | None,
        largest: list[torch.Tensor | None] | None,
    ) -> Bucket:
        ort = load_onnxruntime()
        session = self._sessions[size]
        binding = session.io_binding()
        view = full_input[:size]
        self._bind(binding.bind_input, self.spec.input.name, view, self.spec.input.numpy_dtype)
        for spec, sizes in zip(self.spec.size_inputs, size_inputs, strict=True):
            self._bind(binding.bind_input, spec.name, sizes[:size], spec.numpy_dtype)
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
            self._bind(binding.bind_output, out.name, tensor, out.numpy_dtype)
            outputs.append(tensor)
        run_options = ort.RunOptions()
        if self.device.type == "cuda":
            # Return as soon as the run is queued on the pipeline's stream: everything that
            # reads its outputs is queued behind it on the same stream.
            run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        if graph_id is not None:
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return Bucket(size, view, outputs, binding, run_options, graph_id, session)

    def _bind(self, bind: Any, name: str, tensor: torch.Tensor, dtype: Any) -> None:
        bind(
            name,
            self.device.type,
            self.device.index or 0,
            dtype,
            tuple(tensor.shape),
            tensor.data_ptr(),
        )

    # -- running -------------------------------------------------------------------------------

    def run(self, bucket: Bucket | None = None, *, eager: bool = False) -> list[torch.Tensor]:
        """Run ``bucket`` (default: the first buffer's full batch) on its input's current content.

        On CUDA the run is queued on :attr:`cuda_stream` and returns without
        waiting for it; whatever reads the outputs on that stream (or on the
        caller's stream, which is made to wait by an event) sees them done.
        Preallocated outputs are returned as the same tensors every time;
        outputs whose size is only known per run are adopted from ONNX Runtime
        through DLPack, without a copy. ``eager`` runs without the bucket's CUDA
        graph (a reference for the replay; same outputs, same addresses).
        """
        if bucket is None:
            bucket = self.buffers[0].largest
        run_options = bucket.run_options
        if eager and bucket.graph_id is not None:
            run_options = self._eager_options()
        elif bucket.graph_id is not None:
            transfers.implicit_sync("graph_replay")  # ORT synchronises the stream after a replay
        try:
            with self._ordered(), self._gpu_lock or contextlib.nullcontext():
                self._call(self._run_bound, bucket, run_options)
        except Exception as exc:
            raise ModelError(f"inference failed: {first_line(exc)}") from exc
        if all(t is not None for t in bucket.outputs):
            return bucket.outputs  # type: ignore[return-value]
        produced = bucket.binding.get_outputs()
        return [
            t if t is not None else torch.from_dlpack(produced[i])
            for i, t in enumerate(bucket.outputs)
        ]

    def _eager_options(self) -> Any:
        options = load_onnxruntime().RunOptions()
        if self.device.type == "cuda":
            options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        options.add_run_config_entry("gpu_graph_id", EAGER_GRAPH_ID)
        return options


__all__ = ["EAGER_GRAPH_ID", "ModelSession", "ModelThread"]
