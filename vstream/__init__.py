"""vstream: zero-copy object detection on video streams.

Frames are decoded into device tensors, letterboxed into the model's bound
input, run through ONNX Runtime with IO binding, and decoded on the device;
only the compact box metadata crosses to the host.

>>> import vstream                                          # doctest: +SKIP
>>> detector = vstream.Detector(vstream.assets.DEMO_MODEL, device="cpu")  # doctest: +SKIP
>>> for result in detector.stream(vstream.VideoFileSource(vstream.assets.SAMPLE_VIDEO)):
...     print(result.frame_index, result.detections)        # doctest: +SKIP
"""

from vstream import assets
from vstream.errors import ModelError, SourceError, VstreamError
from vstream.evaluation import Accuracy, evaluate
from vstream.frame import ColourMatrix, ColourSpace, Frame, PixelFormat
from vstream.pipeline import Detector, RunSummary, run_detection
from vstream.postprocess import OutputFormat
from vstream.results import Detection, FrameResult
from vstream.sinks import JsonLinesSink
from vstream.sources import (
    FreshnessPolicy,
    ReconnectPolicy,
    Source,
    SourceOptions,
    SourceState,
    VideoFileSource,
    open_source,
)

__version__ = "0.1.0"

__all__ = [
    "Accuracy",
    "ColourMatrix",
    "ColourSpace",
    "Detection",
    "Detector",
    "Frame",
    "FrameResult",
    "FreshnessPolicy",
    "JsonLinesSink",
    "ModelError",
    "OutputFormat",
    "PixelFormat",
    "ReconnectPolicy",
    "RunSummary",
    "Source",
    "SourceError",
    "SourceOptions",
    "SourceState",
    "VideoFileSource",
    "VstreamError",
    "__version__",
    "assets",
    "evaluate",
    "open_source",
    "run_detection",
]
