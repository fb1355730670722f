"""Which part of the GPU path makes a process end in a segmentation fault at exit.

GPU processes of this project (``vstream doctor``, ``pytest -m gpu``, the benchmark's
tables) have printed all their output and then died with SIGSEGV at interpreter exit
(BENCHMARKS.md). This loads one part, or several, uses it briefly and returns normally,
so that the exit code of each combination says which one it is:

    python -X faulthandler benchmarks/exit_probe.py --source 1080p.mp4 torch ort nvdec

Parts: ``torch`` (a CUDA tensor and a stream), ``ort`` (an ONNX Runtime session on the
CUDA provider, run once on a torch tensor through IO binding), ``nvdec`` (a PyNvVideoCodec
decoder through vstream's file source, 30 frames), ``pipeline`` (one stream through the
engine, started and stopped as the API does), ``decoder_caps`` and ``encoder_caps``
(PyNvVideoCodec's capability queries, as the doctor's environment report asks them; the
encoder's raises on a GPU without NVENC, such as the H100), ``graphs`` (the doctor's
detector with ONNX Runtime's CUDA graphs, run until they replay), and ``check:NAME`` (one
of ``vstream doctor``'s checks, as the doctor runs it, e.g. ``check:copies-gpu``).

The full doctor's crash is in the interpreter's last garbage collection, clearing a weak
reference (``Py_FinalizeEx`` -> ``_PyWeakref_ClearRef``). ``--collect`` collects garbage
explicitly before returning, with the parts' objects still reachable or not, so that a
crash there has a Python frame; ``--gc-debug`` prints the type of every object each later
collection finds unreachable (``gc.DEBUG_COLLECTABLE``, printed before their weak
references are cleared): the last ones printed before a crash are the objects it was
clearing; ``--freeze`` moves every object alive at the end out of the collector's reach
(``gc.freeze()``), so that the interpreter's last collections never visit them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "vstream" / "assets" / "demo.onnx"


def use_torch() -> None:
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.ones(1024, device="cuda") * 2
    stream.synchronize()
    print("torch", float(x.sum()))


def use_ort() -> None:
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(DEMO), providers=["CUDAExecutionProvider"])
    spec = session.get_inputs()[0]
    shape = [1 if not isinstance(d, int) else d for d in spec.shape]
    shape[0] = 1
    x = torch.zeros(shape, device="cuda", dtype=torch.float32)
    binding = session.io_binding()
    binding.bind_input(spec.name, "cuda", 0, "float32", list(x.shape), x.data_ptr())
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda")
    session.run_with_iobinding(binding)
    print("ort", session.get_providers()[0], [o.shape() for o in binding.get_outputs()])


def use_nvdec(source: Path) -> None:
    from vstream.config.sources import SourceOptions
    from vstream.sources.file import VideoFileSource

    options = SourceOptions(decoder="nvdec")
    with VideoFileSource(source, stream_id="0", device="cuda", options=options) as video:
        for n, _ in enumerate(video, 1):
            if n >= 30:
                break
    print("nvdec", n, "frames")


def use_pipeline(source: Path) -> None:
    from vstream.config import parse_data
    from vstream.engine import Engine

    config = parse_data(
        {
            "pipelines": [
                {
                    "name": "exit",
                    "model": {"path": str(DEMO), "imgsz": 320},
                    "runtime": {"device": "cuda"},
                    "sources": [{"id": "cam0", "uri": str(source), "decoder": "nvdec"}],
                    "sinks": [{"type": "jsonl", "path": "/dev/null"}],
                }
            ]
        }
    )
    import threading

    engine = Engine(config)
    engine.start()
    engine.wait(threading.Event(), until_files_done=True)
    engine.stop(timeout=60)
    print("pipeline done")


def use_caps(kind: str) -> None:
    from vstream.decoders.nvdec import CODECS, decoder_caps, load_pynvvideocodec
    from vstream.inference.providers import current_context_kept

    nvc = load_pynvvideocodec()
    for codec in ("h264", "hevc", "av1"):
        if kind == "decoder":  # as the doctor asks it: context kept, failures logged
            print(kind, codec, "answered", decoder_caps(nvc, 0, CODECS[codec]))
            continue
        try:  # as the doctor's environment report asks it
            with current_context_kept():
                answer = nvc.GetEncoderCaps(gpuid=0, codec=codec)
            print(kind, codec, "answered", bool(answer))
        except Exception as exc:
            print(kind, codec, "raised", type(exc).__name__, str(exc)[:80])


def use_graphs() -> None:
    from vstream.doctor.graphs import graphs_match_eager

    print("graphs", graphs_match_eager(DEMO))


def use_check(name: str) -> object:
    """One doctor check on the GPU, as ``vstream doctor --device cuda`` runs it."""
    from vstream.doctor.runner import Doctor, DoctorOptions

    doctor = Doctor(DoctorOptions(device="cuda"))
    detail, _ = getattr(doctor, "check_" + name.replace("-", "_"))()
    print("check", name, detail[:100])
    return doctor


def collect(label: str) -> None:
    import gc

    print(f"collecting ({label})", file=sys.stderr, flush=True)
    found = gc.collect()
    print(f"collected {found} ({label})", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument(
        "parts",
        nargs="+",
        metavar="PART",
        help="torch, ort, nvdec, pipeline, decoder_caps, encoder_caps, graphs, check:NAME",
    )
    parser.add_argument("--collect", action="store_true", help="gc.collect() before returning")
    parser.add_argument(
        "--gc-debug", action="store_true", help="gc.DEBUG_COLLECTABLE for the collections after"
    )
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() before returning")
    args = parser.parse_args()
    kept = []
    for part in args.parts:
        if part == "torch":
            use_torch()
        elif part == "ort":
            use_ort()
        elif part == "nvdec":
            use_nvdec(args.source)
        elif part.endswith("_caps"):
            use_caps(part.removesuffix("_caps"))
        elif part == "graphs":
            use_graphs()
        elif part.startswith("check:"):
            kept.append(use_check(part.removeprefix("check:")))
        elif part == "pipeline":
            use_pipeline(args.source)
        else:
            parser.error(f"unknown part {part!r}")
    if args.collect:
        collect("parts' objects reachable")
        kept.clear()
        collect("parts' objects dropped")
    if args.gc_debug:
        import gc

        gc.set_debug(gc.DEBUG_COLLECTABLE)
    if args.freeze:
        import gc

        gc.freeze()
    print("returning from main", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
