"""Worker: one per device. Loads the model, sizes and allocates the KV cache, runs steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from tqdm import tqdm

from deepinfer import envs
from deepinfer.config import EngineConfig
from deepinfer.layers.attention import AttentionBatch, get_attention_backend
from deepinfer.layers.linear import process_weights_after_loading
from deepinfer.logger import init_logger
from deepinfer.models.checkpoint import Checkpoint
from deepinfer.models.registry import resolve_model_class
from deepinfer.models.weights import checkpoint_quantization
from deepinfer.worker.cache_engine import CacheEngine
from deepinfer.worker.cuda_graph import CUDAGraphRunner
from deepinfer.worker.model_runner import ModelRunner, PendingStep
from deepinfer.worker.protocol import SchedulerOutput

logger = init_logger(__name__)

_GIB = 1 << 30


@dataclass(frozen=True)
class ModelSpec:
    """What the worker needs to know about the model beyond its config."""

    hf_config: Any
    dtype: torch.dtype
    device: torch.device
    max_model_len: int
    eos_token_ids: frozenset[int]


@torch.no_grad()
def initialize_dummy_weights(model: torch.nn.Module, seed: int) -> None:
    """Random weights at the real shapes: normal(0, 0.02) matrices, ones for norm weights, zero biases.
    Values only need to be finite and of realistic scale; the work done is the same as with real ones."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            param.normal_(0.0, 0.02, generator=generator)
        elif name.endswith("bias"):
            param.zero_()
        else:
            param.fill_(1.0)


class Worker:
    def __init__(self, config: EngineConfig, checkpoint: Checkpoint, spec: ModelSpec) -> None:
        self.config = config
        self.spec = spec
        self.device = spec.device
        if self.device.type == "cpu" and envs.DEEPINFER_CPU_THREADS > 0:
            torch.set_num_threads(envs.DEEPINFER_CPU_THREADS)
        self.batch_invariant = config.model.resolve_batch_invariant()
        self.model = self._load_model(checkpoint)
        self.attn_backend = get_attention_backend("paged")
        self.attn_backend.batch_invariant = self.batch_invariant
        arch = self.model.arch
        self.block_size = config.cache.block_size
        self.kv_dtype = config.cache.resolve_kv_dtype(spec.dtype)
        self.num_blocks = self._decide_num_blocks(arch.num_kv_heads, arch.head_dim)
        self.cache_engine = CacheEngine(self.attn_backend, self.model.num_kv_caches, self.num_blocks,
                                        self.block_size, arch.num_kv_heads, arch.head_dim, self.kv_dtype, self.device)
        self.runner = ModelRunner(self.model, self.cache_engine, self.attn_backend, self.block_size,
                                  self.device, spec.eos_token_ids)
        if self.device.type == "cuda" and not config.model.enforce_eager:
            graphs = CUDAGraphRunner(self.model, self.attn_backend, self.cache_engine.kv_caches,
                                     config.scheduler.max_num_seqs, -(-spec.max_model_len // self.block_size),
                                     self.device)
            graphs.capture()
            self.runner.graph_runner = graphs

    def _load_model(self, checkpoint: Checkpoint) -> torch.nn.Module:
        model_cls = resolve_model_class(self.spec.hf_config)
        with torch.device(self.device):
            model = model_cls(self.spec.hf_config, self.spec.dtype)
        if self.config.model.load_format == "dummy":
            initialize_dummy_weights(model, self.config.model.seed)
        else:
            weights: Iterator = checkpoint.iter_weights()
            if envs.DEEPINFER_TQDM:
                weights = tqdm(weights, desc="Loading weights", unit=" tensors", leave=False)
            model.load_weights(weights)
        quantization = self.config.model.quantization or checkpoint_quantization(self.spec.hf_config)
        process_weights_after_loading(model, quantization, self.batch_invariant)
        return model.eval()

    def _decide_num_blocks(self, num_kv_heads: int, head_dim: int) -> int:
        cache = self.config.cache
        per_block = CacheEngine.bytes_per_block(self.model.num_kv_caches, self.block_size, num_kv_heads, head_dim,
                                                self.kv_dtype)
        if cache.num_kv_blocks is not None:
            num_blocks = cache.num_kv_blocks
        elif self.device.type == "cuda":
            num_blocks = int(self._free_cuda_bytes() // per_block)
        else:
            num_blocks = int(cache.cpu_kv_cache_gib * _GIB // per_block)
            # More blocks than every running request can ever fill only cost memory.
            max_useful = self.config.scheduler.max_num_seqs * -(-self.spec.max_model_len // self.block_size) + 1
            num_blocks = min(num_blocks, max_useful)
        needed = -(-self.spec.max_model_len // self.block_size) + 1
        if num_blocks < needed:
            raise ValueError(
                f"the KV cache has room for {max(num_blocks - 1, 0) * self.block_size} tokens but one request of "
                f"max_model_len={self.spec.max_model_len} needs {(needed - 1) * self.block_size}; lower max_model_len "
                f"or give the cache more memory (num_kv_blocks, cpu_kv_cache_gib or gpu_memory_utilization)"
            )
        logger.info("KV cache: %d blocks of %d tokens (%.2f GiB)", num_blocks, self.block_size,
                    num_blocks * per_block / _GIB)
        return num_blocks

    def _free_cuda_bytes(self) -> float:
        """Device memory left for the KV cache after weights and the peak of a full-budget step."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        self._profile_step()
        peak = torch.cuda.max_memory_allocated(self.device)
        total = torch.cuda.get_device_properties(self.device).total_memory
        return max(total * self.config.cache.gpu_memory_utilization - peak, 0)

    @torch.inference_mode()
    def _profile_step(self) -> None:
        """One forward pass of a max_num_batched_tokens prefill, to measure activation memory."""
        arch = self.model.arch
        bs = self.block_size
        num_tokens = min(self.config.scheduler.max_num_batched_tokens, self.spec.max_model_len)
        num_blocks = -(-num_tokens // bs)
        dummy = CacheEngine(self.attn_backend, self.model.num_kv_caches, num_blocks + 1, bs, arch.num_kv_heads,
                            arch.head_dim, self.kv_dtype, self.device)
        positions = np.arange(num_tokens)
        batch = AttentionBatch(
            query_start_loc=np.array([0, num_tokens]),
            seq_lens=np.array([num_tokens]),
            block_tables=[list(range(1, num_blocks + 1))],
            slot_mapping=positions + bs,
            num_decodes=0,
            block_size=bs,
        )
        metadata = self.attn_backend.build_metadata(batch, dummy.kv_caches, self.device)
        ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        hidden = self.model(ids, torch.from_numpy(positions).to(self.device), metadata)
        self.model.compute_logits(hidden[-1:])
        del dummy, hidden
        torch.cuda.synchronize(self.device)

    def execute_model(self, scheduled: SchedulerOutput) -> PendingStep:
        """Launch one step; ``.result()`` of the returned handle waits for its tokens."""
        return self.runner.execute_model(scheduled)
