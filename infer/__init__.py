"""The inference runtime: KV cache, verification, the decoding engine, metrics and the bench."""

from .engine import Engine, GenerationResult, predicted_speedup
from .metrics import SpecMetrics
from .proposal import Drafter, Proposal
from .sampling import GREEDY, SamplingConfig, logits_to_probs

__all__ = [
    "GREEDY",
    "Drafter",
    "Engine",
    "GenerationResult",
    "Proposal",
    "SamplingConfig",
    "SpecMetrics",
    "logits_to_probs",
    "predicted_speedup",
]
