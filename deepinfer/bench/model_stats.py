"""How many bytes and FLOPs a token costs in deepinfer's model: the inputs of the roofline bounds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deepinfer.layers.embedding import LMHead, VocabEmbedding
from deepinfer.layers.linear import Linear


@dataclass
class ModelStats:
    param_count: int
    """Parameters of the model, a tied embedding / LM head counted once."""
    param_bytes: int
    weight_bytes_per_token: int
    """Bytes of weights one decode step reads: every parameter except an untied input embedding
    table, of which a step reads only one row per token."""
    embedding_params: int
    """Input embedding table (a lookup, no FLOPs; counted in matmul_params only when tied)."""
    lm_head_params: int
    matmul_params: int
    """Parameters multiplied by every token's hidden state in the layers (all but the embedding
    and the LM head, which runs only on the tokens that are sampled)."""
    kv_bytes_per_token: int
    """KV-cache bytes of one token position, all layers (what attention reads per position)."""
    num_layers: int
    num_heads: int
    head_dim: int

    @classmethod
    def of(cls, model: torch.nn.Module, kv_bytes_per_token: int) -> "ModelStats":
        # A Linear may hold its weight in a run-time form (packed, FP8) and free the checkpoint
        # tensor, so its size comes from its shape and weight_bytes, not from its parameter.
        linears = [m for m in model.modules() if isinstance(m, Linear)]
        linear_weights = {id(m.weight) for m in linears}
        unique = {id(p): p for p in model.parameters() if id(p) not in linear_weights}  # tied weights once
        param_count = sum(p.numel() for p in unique.values()) + sum(
            m.input_size * sum(m.output_sizes) for m in linears)
        param_bytes = sum(p.numel() * p.element_size() for p in unique.values()) + sum(
            m.weight_bytes for m in linears)
        heads = [m for m in model.modules() if isinstance(m, LMHead)]
        embeds = [m for m in model.modules() if isinstance(m, VocabEmbedding)]
        head_ids = {id(h.weight) for h in heads}
        untied = [e.weight for e in embeds if id(e.weight) not in head_ids]
        embedding_params = sum(e.weight.numel() for e in embeds)
        lm_head_params = sum({id(h.weight): h.weight.numel() for h in heads}.values())
        arch = getattr(model, "arch", None)
        return cls(
            param_count=param_count,
            param_bytes=param_bytes,
            weight_bytes_per_token=param_bytes - sum(w.numel() * w.element_size() for w in untied),
            embedding_params=embedding_params,
            lm_head_params=lm_head_params,
            matmul_params=param_count - sum(w.numel() for w in untied) - lm_head_params,
            kv_bytes_per_token=kv_bytes_per_token,
            num_layers=getattr(arch, "num_layers", 0),
            num_heads=getattr(arch, "num_heads", 0),
            head_dim=getattr(arch, "head_dim", 0),
        )

    def decode_step_bytes(self, batch_size: int, mean_context: float) -> float:
        """Bytes one decode step of ``batch_size`` sequences reads: the weights once, plus each
        sequence's KV cache at its context length."""
        return self.weight_bytes_per_token + batch_size * mean_context * self.kv_bytes_per_token

    def attention_flops(self, context: float) -> float:
        """FLOPs of attention for one query token over ``context`` keys: q.k and p.v, 2 FLOPs per
        multiply-add each, over all heads and layers."""
        return 4.0 * self.num_layers * self.num_heads * self.head_dim * context


def engine_model_stats(llm) -> ModelStats:
    """ModelStats of a running ``LLM``'s model and KV-cache layout."""
    worker = llm.engine.worker
    model = worker.model
    arch = model.arch
    element = torch.tensor([], dtype=worker.kv_dtype).element_size()
    # keys and values, every KV cache (one per attention layer), every KV head
    kv_bytes = 2 * model.num_kv_caches * arch.num_kv_heads * arch.head_dim * element
    return ModelStats.of(model, kv_bytes)
