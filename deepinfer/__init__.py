"""deepinfer: an LLM inference engine.

    from deepinfer import LLM, SamplingParams
"""

from deepinfer.entrypoints.llm import LLM
from deepinfer.outputs import CompletionOutput, Logprob, RequestOutput
from deepinfer.sampling_params import SamplingParams

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob"]
