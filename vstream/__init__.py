"""vstream: zero-copy object detection on video streams.

Frames are decoded into device tensors, letterboxed into the model's bound
input, run through ONNX Runtime with IO binding, and decoded on the device;
only the compact box metadata crosses to the host.

>>> import vstream                                          # doctest: +SKIP
>>> for result in vstream.detect("video.mp4", model="yolov8n.onnx", conf=0.3):
...     print(result.frame_index, result.detections)        # doctest: +SKIP

Attributes load on first use, so ``import vstream`` costs almost nothing.
"""

from vstream.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "Accuracy",
    "ColourMatrix",
    "ColourSpace",
    "Detection",
    "Detections",
    "Detector",
    "Engine",
    "Frame",
    "FrameResult",
    "FreshnessPolicy",
    "ModelError",
    "OutputFormat",
    "PipelineConfig",
    "PixelFormat",
    "ReconnectPolicy",
    "Source",
    "SourceError",
    "SourceOptions",
    "SourceState",
    "VideoFileSource",
    "VstreamConfig",
    "VstreamError",
    "__version__",
    "assets",
    "detect",
    "evaluate",
    "load_config",
    "open_source",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "assets": "vstream.assets",
        "Accuracy": "vstream.evaluation",
        "evaluate": "vstream.evaluation",
        "ColourMatrix": "vstream.frame",
        "ColourSpace": "vstream.frame",
        "Frame": "vstream.frame",
        "PixelFormat": "vstream.frame",
        "Detection": "vstream.results",
        "Detections": "vstream.results",
        "FrameResult": "vstream.results",
        "Detector": "vstream.detector",
        "detect": "vstream.api",
        "Engine": "vstream.engine.engine",
        "ModelError": "vstream.errors",
        "SourceError": "vstream.errors",
        "VstreamError": "vstream.errors",
        "OutputFormat": "vstream.postprocess.formats",
        "FreshnessPolicy": "vstream.config.sources",
        "ReconnectPolicy": "vstream.config.sources",
        "SourceOptions": "vstream.config.sources",
        "PipelineConfig": "vstream.config.pipelines",
        "VstreamConfig": "vstream.config.pipelines",
        "load_config": "vstream.config.loading",
        "Source": "vstream.sources.base",
        "SourceState": "vstream.sources.base",
        "VideoFileSource": "vstream.sources.file",
        "open_source": "vstream.sources",
    },
)
