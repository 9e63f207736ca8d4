"""Custom kernels. Each op is a public function in ``ops/<op>.py`` with a torch reference
``<op>_ref`` of the same signature (also the CPU implementation) and a Triton backend in
``ops/triton/<op>.py``; ``deepinfer.ops.dispatch`` picks one per device."""

from deepinfer.ops.dispatch import OP_NAMES, backend_name, get_op, verify_backends
from deepinfer.ops.exponential_race import exponential_race
from deepinfer.ops.gemv import gemv
from deepinfer.ops.linear_batch_invariant import linear_batch_invariant
from deepinfer.ops.quantize_fp8 import quantize_fp8_per_token
from deepinfer.ops.paged_attention import paged_decode_attention, paged_prefill_attention
from deepinfer.ops.rms_norm import rms_norm
from deepinfer.ops.rotary_embedding import rotary_embedding
from deepinfer.ops.silu_and_mul import silu_and_mul
from deepinfer.ops.write_kv_cache import write_kv_cache

verify_backends()  # a backend with a missing, extra or duplicate op fails here, at import

__all__ = [
    "OP_NAMES", "backend_name", "exponential_race", "gemv", "get_op", "linear_batch_invariant",
    "paged_decode_attention", "paged_prefill_attention", "quantize_fp8_per_token", "rms_norm",
    "rotary_embedding", "silu_and_mul", "write_kv_cache",
]
