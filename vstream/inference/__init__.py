"""The inference engine: ONNX Runtime sessions with IO binding."""

from vstream.inference.engine import InferenceEngine
from vstream.inference.model import ModelSpec, TensorSpec
from vstream.inference.providers import ProviderChoice
from vstream.inference.runtime import describe_runtime, installed_runtime_wheels

__all__ = [
    "InferenceEngine",
    "ModelSpec",
    "ProviderChoice",
    "TensorSpec",
    "describe_runtime",
    "installed_runtime_wheels",
]
