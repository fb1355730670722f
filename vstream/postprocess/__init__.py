"""Postprocessing on the device: decode, NMS, map boxes back to frame pixels."""

from vstream.lazy import lazy_exports

__all__ = ["DETECTION_COLUMNS", "OutputFormat", "Postprocessor", "recognise"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DETECTION_COLUMNS": "vstream.postprocess.decode",
        "Postprocessor": "vstream.postprocess.decode",
        "OutputFormat": "vstream.postprocess.formats",
        "recognise": "vstream.postprocess.formats",
    },
)
