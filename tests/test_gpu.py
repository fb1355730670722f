"""The GPU path on a real GPU: ``pytest -m gpu``. Every test skips cleanly without CUDA.

NVDEC tests also skip (with the probe's reason) where NVDEC does not work,
e.g. a container started without the ``video`` driver capability. Each of
them decodes with the real PyNvVideoCodec and asserts that it did (the
decoder's name, frames in an NVDEC ring): none can pass with the CPU decoder
standing in.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
import torch
from helpers import (
    OPEN_GOP,
    SlowReader,
    bucket_sessions,
    decoding_lags,
    joined_between_key_frames,
    key_frames,
    model_session,
    resumes,
    run_cli,
    write_10bit,
    write_video,
)
from onnx_models import scale_model

from vstream.assets import DEMO_MODEL, SAMPLE_VIDEO
from vstream.config.sources import SourceOptions
from vstream.decoders import nvdec_status, open_decoder
from vstream.decoders.nvdec import NvdecDecoder
from vstream.detector import Detector
from vstream.doctor.accuracy import match_records
from vstream.doctor.copies import count_copies
from vstream.engine.pipeline import detect_iter
from vstream.frame import Frame, PixelFormat
from vstream.inference.providers import pipeline_stream
from vstream.preprocess.colour import to_rgb_planar
from vstream.preprocess.letterbox import Letterboxer
from vstream.sources.file import VideoFileSource
from vstream.transfer import HostStaging, to_host, transfers

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)"),
]

CUDA = torch.device("cuda")
"""The device as configs write it, without an index: tensors on it report cuda:N (issue 20)."""


@pytest.fixture
def ort_cuda() -> None:
    from vstream.inference.wheels import load_onnxruntime

    if "CUDAExecutionProvider" not in load_onnxruntime().get_available_providers():
        pytest.skip("the installed ONNX Runtime has no CUDA provider (onnxruntime-gpu)")


@pytest.fixture
def nvdec() -> None:
    works, why = nvdec_status(CUDA)
    if not works:
        pytest.skip(f"NVDEC unavailable: {why}")


@pytest.fixture
def stream() -> torch.cuda.Stream:
    """A pipeline stream, made current: what a reader or stage thread runs on."""
    made = pipeline_stream(CUDA)
    with torch.cuda.stream(made):
        yield made
    torch.cuda.synchronize()


def nv12_reference(path: Path) -> list[tuple[float, np.ndarray]]:
    with av.open(str(path)) as container:
        return [
            (float(f.pts * f.time_base), f.to_ndarray(format="nv12"))
            for f in container.decode(video=0)
        ]


def assert_frames_equal(pictures: list, expected: list[tuple[float, np.ndarray]]) -> None:
    torch.cuda.synchronize()
    assert len(pictures) == len(expected)
    for picture, (pts, pixels) in zip(pictures, expected, strict=True):
        got = picture.data.cpu().numpy().astype(int)
        difference = np.abs(got - pixels.astype(int))
        assert difference.mean() < 0.5 and difference.max() <= 4, "NVDEC matches FFmpeg"
        assert picture.pts_seconds == pytest.approx(pts)


def test_nvdec_frames_equal_pyavs_decode(tmp_path: Path, nvdec: None, stream) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=30, width=320, height=240)
    decoder = NvdecDecoder(str(path), device=CUDA)
    pictures = list(decoder.pictures())
    ring = decoder.ring
    decoder.close()
    assert all(p.data.is_cuda and p.pixel_format is PixelFormat.NV12 for p in pictures)
    assert ring is not None and all(ring.owns(p.data) for p in pictures), "vstream's memory"
    assert_frames_equal(pictures, nv12_reference(path))


def test_a_live_nvdec_picture_comes_out_of_its_own_packet_s_decode(
    tmp_path: Path, nvdec: None, stream
) -> None:
    """What the fake PyNvVideoCodec models, on the real one: a camera's picture (no B-frames)
    leaves NVDEC in the Decode call of its own packet live, and later as a file's (the
    parser's end of picture and the display queue), with the same pixels either way."""
    path = write_video(tmp_path / "camera.mp4", frames=24, width=320, height=240, b_frames=0)
    expected = nv12_reference(path)
    lags = {}
    for low_delay in (True, False):
        decoder = NvdecDecoder(str(path), device=CUDA, cache=None, low_delay=low_delay)
        pictures: list = []
        lags[low_delay] = decoding_lags(decoder, path, keep=pictures)
        assert_frames_equal(pictures, expected)
    assert lags[True] == [0] * 23, "live: each picture from its own packet"
    assert min(lags[False]) >= 1, "a file's: after the next packet at least"


@pytest.mark.parametrize(
    "encoding",
    [dict(b_frames=0), dict(codec="libx265", codec_options=OPEN_GOP)],
    ids=["camera", "hevc-open-gop"],
)
def test_a_live_nvdec_stream_too_far_behind_decodes_on_cleanly_from_a_key_frame(
    tmp_path: Path, nvdec: None, stream, monkeypatch: pytest.MonkeyPatch, encoding: dict
) -> None:
    """The contract test's skipping on the real PyNvVideoCodec: read at 60 ms a packet of a
    25 frames/s stream with a limit of 1 s, packets are skipped up to key frames (an open
    group's leading pictures with them), and every picture NVDEC gives after a skip is
    FFmpeg's from decoding the whole clip."""
    path = write_video(tmp_path / "c.mp4", frames=150, width=320, height=240, gop=10, **encoding)
    reference = {round(pts, 6): pixels for pts, pixels in nv12_reference(path)}
    SlowReader(monkeypatch, decode_seconds=0.06)
    decoder = NvdecDecoder(
        str(path), device=CUDA, cache=None, low_delay=True, max_behind_seconds=1.0
    )
    read: list[float] = []  # every packet's time stamp, in the order read
    decoder.demuxer.tap = SimpleNamespace(
        add=lambda packet: read.append(round(float(packet.pts * packet.time_base), 6))
    )
    pictures, expected = [], []
    try:
        for picture in decoder.pictures():
            pictures.append(picture)
            expected.append((picture.pts_seconds, reference[round(picture.pts_seconds, 6)]))
            assert_frames_equal(pictures[-1:], expected[-1:])  # before the ring reuses it
        skipped = decoder.packets_skipped
    finally:
        decoder.close()
    assert skipped > 0 and len(pictures) + skipped == 150
    resumed = resumes(read, decoded={round(p.pts_seconds, 6) for p in pictures})
    assert resumed and set(resumed) <= {round(t, 6) for t in key_frames(path)}


def test_a_stream_joined_between_key_frames_shows_no_picture_missing_its_references(
    tmp_path: Path, nvdec: None, stream
) -> None:
    """A camera joined mid-group (as an RTSP connection usually is): its first packets
    refer to pictures never received. FFmpeg shows nothing before the first key frame;
    live input skips those packets, counted, before any decoder sees them, so the real
    NVDEC, given the parameter sets in front of each key frame (FFmpeg's ``dump_extra``,
    as for a camera that sends them in its SDP alone), shows FFmpeg's pictures, none
    decoded from nothing."""
    whole = write_video(tmp_path / "c.ts", frames=40, width=320, height=240, gop=10, b_frames=0)
    joined = joined_between_key_frames(whole, tmp_path / "joined.ts", after=5)
    expected = nv12_reference(joined)
    assert 0 < len(expected) < 35, "FFmpeg drops what precedes the first key frame"
    decoder = NvdecDecoder(str(joined), device=CUDA, cache=None, low_delay=True)
    pictures = []
    try:
        for picture in decoder.pictures():
            pictures.append(picture)
            assert_frames_equal(pictures[-1:], expected[len(pictures) - 1 : len(pictures)])
    finally:
        decoder.close()
    assert len(pictures) == len(expected)
    assert len(pictures) + decoder.packets_skipped == 35


def test_nvdec_taken_on_the_default_stream_decodes_on_a_stream_of_its_own(
    tmp_path: Path, nvdec: None
) -> None:
    """On stream 0 PyNvVideoCodec would synchronise the host after every frame."""
    assert torch.cuda.current_stream().cuda_stream == 0
    path = write_video(tmp_path / "clip.mp4", frames=12, width=320, height=240)
    decoder = NvdecDecoder(str(path), device=CUDA, cache=None)
    assert decoder._stream_handle != 0
    pictures = list(decoder.pictures())  # read on stream 0, after the copies by an event
    decoder.close()
    assert_frames_equal(pictures, nv12_reference(path))


def test_postprocessing_on_the_gpu_waits_only_where_it_counts(ort_cuda) -> None:
    """torch's sync debug mode sees exactly the host waits vstream names and counts."""
    import warnings

    detector = Detector(DEMO_MODEL, device="cuda", batch_size=4)
    with VideoFileSource(SAMPLE_VIDEO, device=CUDA) as source:
        frames = list(itertools.islice(source, 4))
    geometries = [detector.preprocess(0, slot, f) for slot, f in enumerate(frames)]
    raw = detector.infer(0, 4)
    detector.postprocessor(raw, geometries)  # warm: tables and geometry made once
    torch.cuda.synchronize()
    before = transfers.implicit_sync_total()
    with warnings.catch_warnings(record=True) as syncs:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            detections = detector.postprocessor(raw, geometries)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    counted = transfers.implicit_sync_total() - before
    assert 1 <= counted <= 3 and len(detections) > 0
    assert len(syncs) == counted, [str(w.message) for w in syncs]


def test_device_nv12_to_rgb_and_letterbox_equal_the_cpu_path(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=3, width=320, height=180)
    _, nv12 = nv12_reference(path)[1]
    on_cpu = Frame(torch.from_numpy(nv12), PixelFormat.NV12, 320, 180)
    on_gpu = Frame(torch.from_numpy(nv12).to(CUDA), PixelFormat.NV12, 320, 180)
    torch.testing.assert_close(
        to_rgb_planar(on_gpu).cpu(), to_rgb_planar(on_cpu), atol=1e-2, rtol=0
    )
    boxes = [Letterboxer(torch.zeros((2, 3, 256, 256), device=d)) for d in ("cpu", CUDA)]
    geometries = [box.load(1, frame) for box, frame in zip(boxes, (on_cpu, on_gpu), strict=True)]
    assert geometries[0] == geometries[1]
    torch.testing.assert_close(boxes[1].input.cpu(), boxes[0].input, atol=1e-3, rtol=0)


def test_bound_device_pointers_and_preallocated_device_outputs(tmp_path: Path, ort_cuda) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cuda", batch_size=4, imgsz=64, in_flight=2
    )
    assert engine.device.type == "cuda" and engine.providers[0] == "CUDAExecutionProvider"
    options = engine.session.get_provider_options()["CUDAExecutionProvider"]
    assert int(options["user_compute_stream"], 0) == engine.cuda_stream.cuda_stream
    for buffer in engine.buffers:
        for bucket in buffer.buckets:
            assert all(t.is_cuda for t in bucket.outputs)
            addresses = tuple(t.data_ptr() for t in bucket.outputs)
            for round_ in range(25):
                buffer.input.fill_(round_ / 10)  # on this thread's stream: run() orders itself
                (out,) = engine.run(bucket)
                assert out is bucket.outputs[0]
                produced = tuple(v.data_ptr() for v in bucket.binding.get_outputs())
                assert produced == addresses, "ORT wrote where we preallocated, every run"
                assert torch.allclose(out, torch.full_like(out, 2 * round_ / 10)), "read our input"


def test_each_bucket_runs_in_a_cuda_session_of_its_own_on_the_pipelines_stream(
    tmp_path: Path, ort_cuda
) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cuda", batch_size=8, imgsz=64, in_flight=2
    )
    first = engine.buffers[0]
    for session in bucket_sessions(engine, 4):
        assert session.get_providers()[0] == "CUDAExecutionProvider"
        options = session.get_provider_options()["CUDAExecutionProvider"]
        assert int(options["user_compute_stream"], 0) == engine.cuda_stream.cuda_stream
    for round_, frames in enumerate((1, 2, 1, 4, 3, 8, 1)):
        first.input.fill_(round_)
        (out,) = engine.run(first.bucket_for(frames))
        assert (out.cpu() == 2 * round_).all()


def test_to_host_copies_into_pinned_memory_and_waits_only_on_its_event() -> None:
    staging = HostStaging(pinned=True)
    before_bytes, _ = transfers.snapshot()
    before_waits = transfers.host_waits
    first = torch.rand((37, 7), device=CUDA)
    host = to_host(first, staging)
    assert staging.buffer.is_pinned()
    np.testing.assert_array_equal(host, first.cpu().numpy())
    address = staging.buffer.data_ptr()
    second = torch.rand((20, 7), device=CUDA)
    np.testing.assert_array_equal(to_host(second, staging), second.cpu().numpy())
    assert staging.buffer.data_ptr() == address, "the pinned buffer is reused"
    assert transfers.snapshot()[0] - before_bytes == (37 + 20) * 28
    assert transfers.host_waits - before_waits == 2


def test_four_streams_of_500_frames_give_the_cpu_paths_records(ort_cuda) -> None:
    frames = 500

    def run(detector: Detector, streams: int) -> dict[str, list[dict]]:
        with contextlib.ExitStack() as stack:
            sources = [
                stack.enter_context(
                    VideoFileSource(
                        SAMPLE_VIDEO,
                        stream_id=f"s{i}",
                        device=detector.device,
                        options=SourceOptions(loop=True),
                    )
                )
                for i in range(streams)
            ]
            results = list(detect_iter(detector, [itertools.islice(s, frames) for s in sources]))
        by_stream: dict[str, list[dict]] = {}
        for result in results:
            by_stream.setdefault(str(result.stream_id), []).append(result.to_record())
        return by_stream

    gpu = run(Detector(DEMO_MODEL, device="cuda", batch_size=4), 4)
    (cpu,) = run(Detector(DEMO_MODEL, device="cpu", batch_size=4), 1).values()
    assert len(gpu) == 4
    for records in gpu.values():
        assert [r["frame"] for r in records] == list(range(frames)), "every frame once, in order"
        same_frames = [r | {"stream": "s"} for r in records]
        matched, total = match_records([r | {"stream": "s"} for r in cpu], same_frames)
        assert matched >= 0.98 * total, f"{matched} of {total} boxes match the CPU path"
        first = [r | {"stream": "s"} for r in next(iter(gpu.values()))]
        matched, total = match_records(first, same_frames)
        assert matched >= 0.999 * total, "the four GPU streams agree box for box: no race"


def test_cuda_graph_replay_equals_eager_and_detections_do_not_change(ort_cuda) -> None:
    graphs = [{"name": "cuda", "options": {"enable_cuda_graph": "1"}}, {"name": "cpu"}]
    detector = Detector(DEMO_MODEL, device="cuda", batch_size=4, providers=graphs)
    model = detector.model
    assert model.cuda_graphs and model._model_thread is not None
    generator = torch.Generator().manual_seed(1)
    for buffer in model.buffers:
        buffer.input.copy_(torch.rand(buffer.input.shape, generator=generator).to(CUDA))
        for bucket in buffer.buckets:
            replayed = [t.clone() for t in model.run(bucket)]
            eager = [t.clone() for t in model.run(bucket, eager=True)]
            torch.testing.assert_close(replayed, eager, atol=1e-3, rtol=1e-3)
    plain = Detector(DEMO_MODEL, device="cuda", batch_size=4)

    def records(d: Detector) -> list[dict]:
        with VideoFileSource(SAMPLE_VIDEO, device=d.device) as source:
            return [r.to_record() for r in detect_iter(d, [itertools.islice(source, 120)])]

    with_graphs, without = records(detector), records(plain)
    matched, total = match_records(without, with_graphs)
    assert matched == total and len(with_graphs) == 120


def test_closing_and_reconnecting_decoders_with_frames_in_flight_corrupts_nothing(
    tmp_path: Path, nvdec: None, stream
) -> None:
    first = write_video(tmp_path / "a.mp4", frames=40, width=320, height=240)
    other = write_video(tmp_path / "b.mp4", frames=40, width=320, height=240, fps=30)
    held = []
    for path in (first, first, other):  # a loop pass, then a reconnect to another stream
        decoder = NvdecDecoder(str(path), device=CUDA)
        pictures = decoder.pictures()
        held.append((path, [p for _, p in zip(range(25), pictures, strict=False)]))
        decoder.close()  # mid-stream, while 25 frames are still "queued"
    dropped = NvdecDecoder(str(other), device=CUDA, cache=None)
    list(dropped.pictures())
    dropped.close()  # destroyed: its surfaces are freed and reused by the allocator
    junk = torch.full((64, 1024, 1024), 0xEE, dtype=torch.uint8, device=CUDA)  # reuse freed memory
    del junk
    for path, pictures in held:
        assert_frames_equal(pictures, nv12_reference(path)[:25])


def test_a_10bit_clip_falls_back_to_the_cpu_decoder_for_that_stream_alone(
    tmp_path: Path, nvdec: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vstream.decoders")
    ten = write_10bit(tmp_path / "ten.mkv")
    eight = write_video(tmp_path / "eight.mp4", frames=6, width=160, height=120)
    for _ in range(2):
        decoder = open_decoder(str(ten), device=CUDA)
        pictures = list(decoder.pictures())
        decoder.close()
        assert decoder.name == "cpu" and len(pictures) == 6
        assert all(p.data.is_cuda for p in pictures)
    other = open_decoder(str(eight), device=CUDA)
    assert other.name == "nvdec"
    other.close()
    notices = [r.getMessage() for r in caplog.records if "on the CPU" in r.getMessage()]
    assert len(notices) == 1 and "yuv420p10le" in notices[0]


def test_no_frame_sized_copy_crosses_and_one_host_wait_per_batch(ort_cuda, nvdec: None) -> None:
    detector = Detector(DEMO_MODEL, device="cuda", batch_size=4)
    # count_copies fails unless NVDEC decoded every frame.
    detail, data = count_copies(detector, SAMPLE_VIDEO, 40)
    assert data["htod_bytes_per_frame"] < data["frame_bytes"], detail
    assert data["dtoh_bytes_per_frame"] < 64 + data["boundary_bytes_per_frame"], detail
    assert data["host_waits"]["cudaEventSynchronize"] == data["model_runs"], detail
    assert data["implicit_syncs"] == 0, "the fixed-shape postprocess: one wait per batch"


def test_the_gpu_postprocess_waits_for_nothing_and_equals_the_exact_path(ort_cuda) -> None:
    """On CUDA the detector postprocesses in fixed shapes: torch's sync debug mode sees no
    wait before the copy, and the records are the exact path's."""
    import warnings

    detector = Detector(DEMO_MODEL, device="cuda", batch_size=4)
    assert detector.fixed_shapes is not None
    with VideoFileSource(SAMPLE_VIDEO, device=CUDA) as source:
        frames = list(itertools.islice(source, 4))
    geometries = detector.preprocess_batch(0, frames)
    raw = detector.infer(0, 4)
    fixed = [r.to_record() for r in detector.postprocess(raw, geometries, frames)]
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as syncs:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            detector.fixed_shapes(raw, geometries)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert not syncs, [str(w.message) for w in syncs]
    shapes, detector.fixed_shapes = detector.fixed_shapes, None
    exact = [r.to_record() for r in detector.postprocess(raw, geometries, frames)]
    detector.fixed_shapes = shapes
    assert fixed == exact and any(r["detections"] for r in exact)


def test_decoding_the_stages_and_ort_share_the_pipelines_stream(ort_cuda, nvdec: None) -> None:
    detector = Detector(DEMO_MODEL, device="cuda", batch_size=4)
    handle = detector.cuda_stream.cuda_stream
    options = detector.model.session.get_provider_options()["CUDAExecutionProvider"]
    assert int(options["user_compute_stream"], 0) == handle
    seen: set[int] = set()
    preprocess, postprocess = detector.preprocess, detector.postprocess

    def on_preprocess(*args):
        seen.add(torch.cuda.current_stream().cuda_stream)
        return preprocess(*args)

    def on_postprocess(*args):
        seen.add(torch.cuda.current_stream().cuda_stream)
        return postprocess(*args)

    detector.preprocess, detector.postprocess = on_preprocess, on_postprocess
    with torch.cuda.stream(detector.cuda_stream):  # where the engine's readers open sources
        source = VideoFileSource(SAMPLE_VIDEO, device=CUDA, options=SourceOptions(decoder="nvdec"))
    with source:
        nvdec = source._decoder._decoder  # the NVDEC decoder inside its CPU-fallback wrapper
        assert isinstance(nvdec, NvdecDecoder), "NVDEC decodes (no fallback to the CPU)"
        assert nvdec._stream_handle == handle, "NVDEC decodes on the pipeline's stream"

        def frames():
            for frame in source:
                seen.add(torch.cuda.current_stream().cuda_stream)  # the reader thread
                yield frame

        assert len(list(detect_iter(detector, [itertools.islice(frames(), 24)]))) == 24
    assert seen == {handle}


def test_an_unindexed_cuda_device_decodes_with_nvdec_into_its_ring(
    tmp_path: Path, nvdec: None, stream
) -> None:
    """``decoder: auto`` on ``cuda`` chooses NVDEC, and NVDEC's cuda:N frames are taken."""
    path = write_video(tmp_path / "clip.mp4", frames=10, width=320, height=240)
    decoder = open_decoder(str(path), device=CUDA)
    assert decoder.name == "nvdec"
    pictures = list(decoder.pictures())
    ring = decoder._decoder.ring
    decoder.close()
    index = torch.cuda.current_device()
    assert {p.data.device for p in pictures} == {torch.device("cuda", index)}
    assert ring is not None and all(ring.owns(p.data) for p in pictures)
    assert_frames_equal(pictures, nv12_reference(path))


def test_vstream_doctor_passes_on_this_gpu(tmp_path: Path, ort_cuda, nvdec: None) -> None:
    report = tmp_path / "doctor.json"
    done = run_cli("doctor", "--device", "cuda", "--json", "--report", report, timeout=280)
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    failed = {name: c["detail"] for name, c in checks.items() if c["status"] == "fail"}
    assert done.returncode == 0 and not failed, failed
    for name in (
        "provider-gpu",
        "nvdec",
        "zero-copy-gpu",
        "copies-gpu",
        "demo-gpu",
        "kernel-gpu",
        "graphs-gpu",
        "fps-gpu",
    ):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["demo-gpu"]["data"]["decoder"] == "nvdec"
    assert checks["zero-copy-gpu"]["data"]["decoder"] == "nvdec"


@pytest.mark.usefixtures("nvdec", "stream")
def test_nvdec_frames_letterbox_to_the_cpu_paths_input_exactly(tmp_path: Path) -> None:
    """One definition on every path: NVDEC's NV12 on the device gives the CPU decoder's input,
    full-range (yuvj420p, as many IP cameras send) included."""
    from vstream.parity import PARITY_DIR

    full_range = write_video(
        tmp_path / "full.mp4", frames=4, width=640, height=360, pix_fmt="yuvj420p"
    )
    for video in [*sorted(PARITY_DIR.glob("*.mp4")), full_range]:
        with VideoFileSource(video, device=CUDA, options=SourceOptions(decoder="nvdec")) as source:
            gpu_frames = list(itertools.islice(source, 4))
            assert source.decoder_name == "nvdec"
        with VideoFileSource(video) as source:
            cpu_frames = list(itertools.islice(source, 4))
        on_gpu, on_cpu = torch.zeros((4, 3, 320, 320), device=CUDA), torch.zeros((4, 3, 320, 320))
        for slot, (g, c) in enumerate(zip(gpu_frames, cpu_frames, strict=True)):
            Letterboxer(on_gpu[slot : slot + 1]).load(0, g)
            Letterboxer(on_cpu[slot : slot + 1]).load(0, c)
        assert torch.equal(on_gpu.cpu(), on_cpu), video.name


def test_the_letterbox_kernel_gives_nvdecs_frames_the_cpu_paths_input_exactly(
    tmp_path: Path, nvdec: None
) -> None:
    """``runtime.letterbox_kernel``: the same reference pixels as FFmpeg and OpenCV give."""
    from vstream.parity import PARITY_DIR
    from vstream.preprocess.kernel import LetterboxKernel
    from vstream.preprocess.resample import Resampler

    kernel = LetterboxKernel(torch.device("cuda", torch.cuda.current_device()))
    full_range = write_video(
        tmp_path / "full.mp4", frames=4, width=640, height=360, pix_fmt="yuvj420p"
    )
    for video in [*sorted(PARITY_DIR.glob("*.mp4")), full_range]:
        with VideoFileSource(video, device=CUDA, options=SourceOptions(decoder="nvdec")) as source:
            gpu_frames = list(itertools.islice(source, 4))
        with VideoFileSource(video) as source:
            cpu_frames = list(itertools.islice(source, 4))
        on_gpu, on_cpu = torch.zeros((4, 3, 320, 320), device=CUDA), torch.zeros((4, 3, 320, 320))
        Letterboxer(on_gpu, resampler=Resampler(4, kernel=kernel)).load_batch(0, gpu_frames)
        Letterboxer(on_cpu).load_batch(0, cpu_frames)
        assert torch.equal(on_gpu.cpu(), on_cpu), video.name


def test_the_letterbox_kernel_takes_a_batch_in_one_launch_from_any_thread(stream) -> None:
    """32 1080p frames, as torch's resampler letterboxes them, with no torch operation once the
    taps are on the device; on a thread with no context current too (pushed for the launch)."""
    import threading

    from vstream.bench.overhead import DispatchCounter
    from vstream.frame import ColourMatrix, ColourSpace
    from vstream.preprocess.kernel import LetterboxKernel
    from vstream.preprocess.resample import Resampler

    kernel = LetterboxKernel(torch.device("cuda", torch.cuda.current_device()))
    generator = torch.Generator(device=CUDA).manual_seed(5)
    pictures = [
        torch.randint(0, 256, (1620, 1920), dtype=torch.uint8, device=CUDA, generator=generator)
        for _ in range(32)
    ]
    colour = ColourSpace(ColourMatrix.BT709, full_range=False)
    size = (1920, 1080)
    expected = torch.zeros((32, 3, 320, 320), device=CUDA)
    Resampler(32).resample(pictures, PixelFormat.NV12, size, colour, expected[:, :, 70:250])
    got = torch.zeros_like(expected)
    with_kernel = Resampler(32, kernel=kernel)
    with_kernel.resample(pictures, PixelFormat.NV12, size, colour, got[:, :, 70:250])
    assert torch.equal(got, expected)
    got.zero_()
    with DispatchCounter() as counter:
        with_kernel.resample(pictures, PixelFormat.NV12, size, colour, got[:, :, 70:250])
    assert counter.total == 0, counter.ops
    assert torch.equal(got, expected)
    halves = torch.zeros((32, 3, 180, 320), device=CUDA, dtype=torch.float16)
    Resampler(32).resample(pictures, PixelFormat.NV12, size, colour, halves)
    by_kernel = torch.zeros_like(halves)
    with_kernel.resample(pictures, PixelFormat.NV12, size, colour, by_kernel)
    assert torch.equal(by_kernel, halves)  # an fp16 model's input
    elsewhere = torch.zeros_like(expected)

    def on_a_new_thread() -> None:
        from cuda.bindings import driver

        with torch.cuda.stream(stream):
            driver.cuCtxSetCurrent(driver.CUcontext(0))  # no context: the launch is refused once
            with_kernel.resample(pictures, PixelFormat.NV12, size, colour, elsewhere[:, :, 70:250])

    thread = threading.Thread(target=on_a_new_thread)
    thread.start()
    thread.join(60)
    torch.cuda.synchronize()
    assert torch.equal(elsewhere, expected)


@pytest.mark.usefixtures("ort_cuda", "nvdec")
def test_nvdec_and_the_device_letterbox_find_what_ultralytics_finds() -> None:
    from vstream.parity import measure, references

    for reference in references():
        score = measure(reference, device="cuda", decoder="nvdec")
        assert score.met, f"{reference.video.name}: {score}"


def test_asking_nvdec_its_capabilities_leaves_torchs_context_current(nvdec, ort_cuda) -> None:
    """GetDecoderCaps makes a context of its own current; ONNX Runtime's cuDNN handle then
    refused the pipeline's stream (CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, seen on an H100 in
    ``vstream doctor``, which lists the codecs before loading a model)."""
    import ctypes

    from vstream.decoders.nvdec import _caps, decoder_caps, load_pynvvideocodec

    driver = ctypes.CDLL("libcuda.so.1")
    torch.cuda.current_stream(CUDA).query()  # torch's primary context, current on this thread
    before, after = ctypes.c_void_p(), ctypes.c_void_p()
    driver.cuCtxGetCurrent(ctypes.byref(before))
    _caps.clear()
    assert decoder_caps(load_pynvvideocodec(), 0, "HEVC") is not None
    driver.cuCtxGetCurrent(ctypes.byref(after))
    assert after.value == before.value
    Detector(DEMO_MODEL, device=CUDA)  # binds the pipeline's stream to cuDNN: raised before
