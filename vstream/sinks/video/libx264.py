"""FFmpeg's libx264 through PyAV: the encoder every machine has.

Many data-centre GPUs (A100, H100) have no NVENC, so this is the path most
annotated videos take. The picture is encoded as yuv420p, BT.601 limited range,
and signalled as such; CUDA pictures are converted to 4:2:0 on the GPU first,
which halves the bytes copied to the host. A live output is tuned for latency.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vstream.sinks.video.container import (
    PUBLISH_FORMAT,
    TIME_BASE,
    Backend,
    frame_rate,
    open_container,
)


class LibX264(Backend):
    """FFmpeg's libx264 through PyAV: yuv420p, BT.601 limited range, signalled as such."""

    name = "libx264"

    def __init__(
        self, path: Path, fmt: str, width: int, height: int, fps: float, options: dict[str, Any]
    ) -> None:
        import av
        from av.video.reformatter import ColorRange, Colorspace

        self.container = open_container(path, fmt)
        stream = self.container.add_stream("libx264", rate=frame_rate(fps))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        context = stream.codec_context
        context.time_base = TIME_BASE
        context.colorspace = int(Colorspace.ITU601)
        context.color_range = int(ColorRange.MPEG)
        if options.get("threads"):
            context.thread_count = int(options["threads"])
        stream.options = {"preset": options["preset"], "crf": str(options["crf"])}
        if fmt == PUBLISH_FORMAT:
            # No frame held back for look-ahead; a viewer joining waits <= 2 s for a key frame.
            stream.options |= {"tune": "zerolatency", "g": str(max(1, round(fps * 2)))}
        self.stream = stream
        self._av = av

    def encode(self, image: torch.Tensor, ticks: int) -> None:
        av = self._av
        if image.is_cuda:
            from vstream.annotate.convert import rgb_to_yuv420

            # Half the bytes to copy, and the conversion stays on the GPU.
            planes = rgb_to_yuv420(image).cpu().numpy()
            frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
        else:
            frame = av.VideoFrame.from_ndarray(image.numpy(), format="rgb24")
        frame.pts, frame.time_base = ticks, TIME_BASE
        for packet in self.stream.encode(frame):
            self.container.mux(packet)

    def finish(self) -> None:
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()
