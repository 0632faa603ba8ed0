"""legato-tosa-custom: emit TOSA 1.0 MLIR; ops a config keeps become tosa.custom."""
from .decode import decode_tosa_custom
from .emitter import emit_mlir
from .narrowing import narrow_inputs
from .plugin import backend
from .resources import TosaArtifact, Weights

__all__ = ["TosaArtifact", "Weights", "backend", "decode_tosa_custom", "emit_mlir",
           "narrow_inputs"]
