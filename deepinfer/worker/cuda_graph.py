"""CUDA graphs for decode steps.

A decode step of a small model is a few hundred short kernels; launching them one by one from
Python costs more than running them. So the forward pass (and the LM head) of a pure-decode
batch is captured once per batch-size bucket and replayed: the batch is padded up to its
bucket (padding rows: token 0 at position 0, KV slot -1 so nothing is written, sequence
length 0 so attention returns zeros) and its inputs are copied into static buffers that the
graphs read. All graphs share one memory pool; they are captured largest first so the smaller
ones reuse its blocks.
"""

from __future__ import annotations

import numpy as np
import torch

from deepinfer.layers.attention import AttentionBackend, AttentionBatch
from deepinfer.layers.attention.paged_backend import block_table_array
from deepinfer.logger import init_logger
from deepinfer.transfer import copy_into

logger = init_logger(__name__)

_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512)


def capture_sizes(max_batch_size: int) -> list[int]:
    sizes = [b for b in _BUCKETS if b < max_batch_size]
    return sizes + [min(max_batch_size, _BUCKETS[-1])]


class CUDAGraphRunner:
    def __init__(self, model: torch.nn.Module, attn_backend: AttentionBackend, kv_caches: list[torch.Tensor],
                 max_batch_size: int, max_blocks_per_seq: int, device: torch.device) -> None:
        self.model = model
        self.sizes = capture_sizes(max_batch_size)
        n = self.sizes[-1]
        self.input_ids = torch.zeros(n, dtype=torch.long, device=device)
        self.positions = torch.zeros(n, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((n,), -1, dtype=torch.long, device=device)
        self.block_tables = torch.zeros((n, max_blocks_per_seq), dtype=torch.int32, device=device)
        self.seq_lens = torch.zeros(n, dtype=torch.int32, device=device)
        self._metadata = {
            size: attn_backend.graph_metadata(kv_caches, self.slot_mapping[:size], self.block_tables[:size],
                                              self.seq_lens[:size])
            for size in self.sizes
        }
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    @property
    def max_batch_size(self) -> int:
        return self.sizes[-1]

    def _forward(self, size: int) -> torch.Tensor:
        hidden = self.model(self.input_ids[:size], self.positions[:size], self._metadata[size])
        return self.model.compute_logits(hidden)

    @torch.inference_mode()
    def capture(self) -> None:
        pool = torch.cuda.graph_pool_handle()
        for size in reversed(self.sizes):
            self._forward(size)  # warm up: Triton compiles, cuBLAS picks its kernels
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = self._forward(size)
            self.graphs[size] = (graph, logits)
        torch.cuda.synchronize()
        logger.info("captured CUDA graphs for decode batch sizes %s", self.sizes)

    def can_run(self, batch: AttentionBatch) -> bool:
        return batch.num_decodes == batch.num_requests and 0 < batch.num_requests <= self.max_batch_size

    def run(self, input_ids: torch.Tensor, positions: np.ndarray, batch: AttentionBatch) -> torch.Tensor:
        """Logits [B, vocab] of a pure-decode batch (a view into the graph's output buffer).
        ``input_ids`` is already on the device (some may come from the previous step's samples)."""
        b = batch.num_requests
        size = next(s for s in self.sizes if s >= b)
        self.input_ids[:b].copy_(input_ids)
        copy_into(self.positions[:b], positions)
        copy_into(self.slot_mapping[:b], batch.slot_mapping)
        copy_into(self.seq_lens[:b], batch.seq_lens)
        # Columns past a row's last block are never read (the kernels stop at seq_len), so only
        # the used columns are copied.
        table = block_table_array(batch.block_tables)
        copy_into(self.block_tables[:b, : table.shape[1]], table)
        if size > b:  # padding rows
            self.input_ids[b:size].zero_()
            self.positions[b:size].zero_()
            self.slot_mapping[b:size].fill_(-1)
            self.seq_lens[b:size].zero_()
        graph, logits = self.graphs[size]
        graph.replay()
        return logits[:b]
