"""Inference: ONNX Runtime sessions with IO binding, and what a model looks like."""

from vstream.lazy import lazy_exports

__all__ = [
    "ModelSession",
    "ModelSpec",
    "ProviderChoice",
    "TensorSpec",
    "describe_runtime",
    "installed_runtime_wheels",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ModelSession": "vstream.inference.session",
        "ModelSpec": "vstream.inference.model",
        "TensorSpec": "vstream.inference.model",
        "ProviderChoice": "vstream.inference.providers",
        "describe_runtime": "vstream.inference.wheels",
        "installed_runtime_wheels": "vstream.inference.wheels",
    },
)
