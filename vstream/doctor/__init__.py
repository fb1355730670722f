"""``vstream doctor``: what this machine has, and proof that vstream's data path works on it.

The one command a user with a GPU runs. It reports the environment (driver
and CUDA versions, torch and its CUDA, the ONNX Runtime wheel and providers,
whether TensorRT loads, PyNvVideoCodec, NVDEC and NVENC per codec) and runs
checks, each ``pass``, ``fail`` or ``skip`` with a reason. Every check rests on evidence from
outside vstream's own bookkeeping (what ONNX Runtime reports, what torch's
CUDA allocator holds, what the profiler saw cross); a check that cannot
gather its evidence says ``skip`` and why, never ``pass``:

``runtime-wheels``  the CPU and GPU wheels of ONNX Runtime are not installed into one
                    folder (they overwrite each other's files there); in different
                    folders, the one imported and the one shadowed are named.
``provider-cpu``    ``session.get_providers()`` of a CPU detector: ``CPUExecutionProvider``.
``provider-gpu``    ``session.get_providers()`` of a CUDA detector starts with
                    ``CUDAExecutionProvider`` (``TensorrtExecutionProvider`` with
                    ``--provider tensorrt``, which runs every GPU check on TensorRT), and
                    ``get_provider_options()`` reports the pipeline's stream as
                    ``user_compute_stream`` (none or 0 fails: ORT then computes on a stream
                    of its own).
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
``kernel-gpu``      the letterbox kernel (``runtime.letterbox_kernel``) compiles for this
                    GPU, and 32 frames of 1080p NV12 noise come out of it as out of
                    torch's device letterbox, bit for bit, in two colour spaces, into
                    float32 and float16 inputs.
``graphs-gpu``      CUDA graphs capture, and replay equals eager for every bucket.
``fps-cpu``         frames per second of each stage alone and end to end (with
``fps-gpu``         the device synchronised before each clock stop, so GPU work
                    is measured, not kernel launches), on the GPU with CUDA
                    graphs off and on.

Without a usable GPU the GPU checks are skipped with the reason, and so are
the NVDEC checks where NVDEC does not work (they fail instead with
``--device cuda``). The exit status is 0 when every check that ran passed, 1
when one failed.

Where each part lives, so that a check can be read, or added, without the rest:

- :mod:`vstream.doctor.runner`: the list of checks in their order, the state
  they share, ``--quick`` and the NVDEC gate, and :func:`run_doctor`.
- :mod:`vstream.doctor.report`: a check's outcome, and the table or JSON
  printed, with the exit status.
- :mod:`vstream.doctor.environment`: the environment section.
- :mod:`vstream.doctor.harness`: the detector, video and engine run every
  check uses, and the spy on ONNX Runtime's runs.
- One module per area of checks: :mod:`~vstream.doctor.providers`
  (``runtime-wheels``, ``provider-*``), :mod:`~vstream.doctor.zero_copy`,
  :mod:`~vstream.doctor.copies`, :mod:`~vstream.doctor.accuracy`
  (``demo-*``, ``reference-*``), :mod:`~vstream.doctor.graphs`,
  :mod:`~vstream.doctor.throughput` (``fps-*``). ``nvdec`` asks
  :func:`vstream.decoders.nvdec_status` and needs no module of its own.

The command imports this package only when it runs, and the area modules
import torch, ONNX Runtime and PyAV inside their functions: loading any of
them stays cheap.
"""
