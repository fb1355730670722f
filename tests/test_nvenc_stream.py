"""The NVENC writer waits for its own conversions only, on a fake cuda:0 (no GPU here).

Its thread used to convert on the legacy default stream and synchronise that
stream once per frame: the legacy stream is ordered with every blocking
stream, the pipelines' included, so each frame waited for all of them
(issue 20).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from fakes.fake_cuda import FakeGpu, on_cuda

from vstream.sinks.video import nvenc


class StandInEncoder:
    """PyNvVideoCodec's encoder as the writer uses it: ``Encode(nv12)`` returns bytes."""

    def __init__(self) -> None:
        self.frames = 0

    def Encode(self, nv12: torch.Tensor) -> bytes:
        assert nv12.is_cuda
        self.frames += 1
        return b""

    def EndEncode(self) -> bytes:
        return b""


def test_the_nvenc_writer_synchronises_its_own_stream_not_the_legacy_default(
    tmp_path: Path, monkeypatch
) -> None:
    gpu = FakeGpu().install(monkeypatch)
    encoder = StandInEncoder()
    nvc = SimpleNamespace(CreateEncoder=lambda *args, **kwargs: encoder)
    monkeypatch.setattr(nvenc, "_import_nvc", lambda: nvc)
    backend = nvenc.Nvenc(tmp_path / "out.mp4", "mp4", 64, 48, 25.0, torch.device("cuda", 0), {})
    for index in range(3):
        picture = on_cuda(torch.full((48, 64, 3), 40 * index, dtype=torch.uint8))
        backend.encode(picture, index * 3600)
    assert encoder.frames == 3
    (writer_stream,) = gpu.made
    assert gpu.waits == [("stream", writer_stream.cuda_stream)] * 3
    assert writer_stream.cuda_stream != 0, "never the legacy default stream"
