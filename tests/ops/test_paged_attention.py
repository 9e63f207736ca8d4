"""Triton paged attention against the torch references.

Without CUDA the kernels run in Triton's CPU interpreter (slow: tiny shapes, and the kernel
module's tile and split sizes are shrunk so that few programs still cover several tiles, splits
and combine chunks). bf16 is checked on CUDA only: the interpreter's bf16 tl.dot is wrong.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    # Must be set before the kernels are defined (triton.jit decides at decoration time).
    os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib  # noqa: E402
import inspect  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("triton")

from deepinfer.ops.paged_attention import paged_decode_attention_ref, paged_prefill_attention_ref  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRETED = DEVICE == "cpu"

kernels = importlib.import_module("deepinfer.ops.triton.paged_attention")
if INTERPRETED and type(kernels._decode_split_kernel).__name__ != "InterpretedFunction":
    kernels = importlib.reload(kernels)  # imported earlier without TRITON_INTERPRET


@pytest.fixture
def small_tiles(monkeypatch):
    """Tile/split sizes small enough for the interpreter yet below the test lengths."""
    if INTERPRETED:
        monkeypatch.setattr(kernels, "DECODE_SPLIT_SIZE", 32)
        monkeypatch.setattr(kernels, "DECODE_BLOCK_N", 16)
        monkeypatch.setattr(kernels, "DECODE_COMBINE_CHUNK", 2)
        monkeypatch.setattr(kernels, "PREFILL_BLOCK_M", 16)
        monkeypatch.setattr(kernels, "PREFILL_BLOCK_N", 16)


def _tolerance(dtype: torch.dtype) -> dict:
    if dtype == torch.float32:
        # On a GPU exp2 is approximate; the interpreter is exact float32 math.
        return dict(atol=1e-5, rtol=1e-5) if INTERPRETED else dict(atol=1e-4, rtol=1e-4)
    return dict(atol=2e-3, rtol=2e-3) if dtype == torch.float16 else dict(atol=1.6e-2, rtol=1.6e-2)


def _paged_setup(seq_lens: list[int], block_size: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 gen: torch.Generator, spare_cols: int = 1, cache_dtype: torch.dtype | None = None):
    """A random cache whose blocks are handed out in shuffled order, the matching block tables
    (padded with 0) and two copies of the cache: ``clean`` for the references and ``poisoned``,
    whose slots owned by no request hold NaN, for the kernels (which must never let them in)."""
    need = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(need) + 2
    order = torch.randperm(num_blocks, generator=gen).tolist()
    max_blocks = max(need) + spare_cols
    tables = torch.zeros(len(seq_lens), max_blocks, dtype=torch.int32)
    used = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    for b, n in enumerate(seq_lens):
        for i in range(need[b]):
            blk = order.pop()
            tables[b, i] = blk
            used[blk, : min(block_size, n - i * block_size)] = True
    clean = torch.randn(2, num_blocks, block_size, kv_heads, head_dim, generator=gen).to(dtype)
    poisoned = clean.clone()
    poisoned[:, ~used] = float("nan")
    if cache_dtype is not None:  # poisoned first: float8 tensors have few CPU kernels
        clean, poisoned = clean.to(cache_dtype), poisoned.to(cache_dtype)
    return clean.to(DEVICE), poisoned.to(DEVICE), tables.to(DEVICE), torch.tensor(seq_lens, dtype=torch.int32,
                                                                                  device=DEVICE)


def _check_decode(seq_lens, group, window, dtype, block_size=16, head_dim=64, kv_heads=2, seed=0, cache_dtype=None):
    gen = torch.Generator().manual_seed(seed)
    clean, poisoned, tables, lens = _paged_setup(seq_lens, block_size, kv_heads, head_dim, dtype, gen,
                                                 cache_dtype=cache_dtype)
    query = torch.randn(len(seq_lens), kv_heads * group, head_dim, generator=gen).to(dtype).to(DEVICE)
    scale = head_dim ** -0.5
    out = kernels.paged_decode_attention(query, poisoned, tables, lens, scale, window)
    ref = paged_decode_attention_ref(query, clean, tables, lens, scale, window)
    assert out.dtype == query.dtype and out.shape == query.shape
    torch.testing.assert_close(out, ref, **_tolerance(dtype))
    for b, n in enumerate(seq_lens):
        if n == 0:
            assert torch.equal(out[b], torch.zeros_like(out[b]))


# 1 token, a block multiple, several splits (32 keys each in the interpreter), a padding row.
DECODE_LENS = [1, 16, 70, 0, 45, 100]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("window", [None, 20])
@pytest.mark.parametrize("group", [1, 4])
def test_decode_matches_reference(small_tiles, group, window, dtype):
    _check_decode(DECODE_LENS, group, window, dtype)


@pytest.mark.parametrize("programs_per_sm", [1, 16, 10_000])
def test_decode_split_slots(small_tiles, monkeypatch, programs_per_sm):
    # One program striding over all splits of a row, a few, or one program per split.
    monkeypatch.setattr(kernels, "DECODE_PROGRAMS_PER_SM", programs_per_sm)
    _check_decode(DECODE_LENS, group=2, window=None, dtype=torch.float32)


@pytest.mark.parametrize("block_size,head_dim", [(8, 32), (64, 128)])
def test_decode_block_sizes(small_tiles, block_size, head_dim):
    # Tiles spanning several cache blocks (8 < 16 keys) and lying inside one (64 > 16).
    _check_decode([3, 40, 0, 77], group=2, window=33, dtype=torch.float32, block_size=block_size, head_dim=head_dim)


def test_decode_grid_ignores_seq_len_values(small_tiles):
    # Same shapes, different lengths (all padding, then all full): no reshaping, no host sync.
    gen = torch.Generator().manual_seed(1)
    clean, _, tables, _ = _paged_setup([64, 64], 16, 1, 32, torch.float32, gen, spare_cols=0)
    query = torch.randn(2, 2, 32, generator=gen).to(DEVICE)
    zeros = kernels.paged_decode_attention(query, clean, tables, torch.zeros(2, dtype=torch.int32, device=DEVICE),
                                           0.2, None)
    assert torch.equal(zeros, torch.zeros_like(zeros))
    full = torch.full((2,), 64, dtype=torch.int32, device=DEVICE)
    torch.testing.assert_close(kernels.paged_decode_attention(query, clean, tables, full, 0.2, None),
                               paged_decode_attention_ref(query, clean, tables, full, 0.2, None), atol=1e-4, rtol=1e-4)


def _check_prefill(requests, group, window, dtype, block_size=16, head_dim=64, kv_heads=2, seed=0, cache_dtype=None):
    """requests: (seq_len, query_len) pairs."""
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [s for s, _ in requests]
    qlens = [q for _, q in requests]
    clean, poisoned, tables, lens = _paged_setup(seq_lens, block_size, kv_heads, head_dim, dtype, gen,
                                                 cache_dtype=cache_dtype)
    starts = torch.tensor([0] + qlens, dtype=torch.int32).cumsum(0).to(torch.int32).to(DEVICE)
    query = torch.randn(sum(qlens), kv_heads * group, head_dim, generator=gen).to(dtype).to(DEVICE)
    scale = head_dim ** -0.5
    out = kernels.paged_prefill_attention(query, poisoned, tables, starts, lens, max(qlens), scale, window)
    ref = paged_prefill_attention_ref(query, clean, tables, starts, lens, max(qlens), scale, window)
    assert out.dtype == query.dtype and out.shape == query.shape
    torch.testing.assert_close(out, ref, **_tolerance(dtype))


# Cached prefix (long enough for fully visible tiles), fresh prompt, one token, empty query,
# a short prompt.
PREFILL_REQUESTS = [(100, 6), (23, 23), (17, 1), (30, 0), (5, 5)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("window", [None, 8, 48])
@pytest.mark.parametrize("group", [1, 4])
def test_prefill_matches_reference(small_tiles, group, window, dtype):
    _check_prefill(PREFILL_REQUESTS, group, window, dtype)


@pytest.mark.parametrize("block_size,head_dim", [(8, 32), (64, 128)])
def test_prefill_block_sizes(small_tiles, block_size, head_dim):
    _check_prefill([(50, 20), (9, 9)], group=2, window=None, dtype=torch.float32, block_size=block_size,
                   head_dim=head_dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fp8_cache_matches_reference(small_tiles, dtype):
    # Both read the same float8 cache back in the query's dtype (decode and prefill, GQA, window).
    fp8 = torch.float8_e4m3fn
    _check_decode(DECODE_LENS, group=4, window=None, dtype=dtype, cache_dtype=fp8)
    _check_decode([3, 40, 0, 77], group=2, window=33, dtype=dtype, cache_dtype=fp8)
    _check_prefill(PREFILL_REQUESTS, group=4, window=None, dtype=dtype, cache_dtype=fp8)
    _check_prefill([(50, 20), (9, 9)], group=2, window=8, dtype=dtype, cache_dtype=fp8)


@pytest.mark.parametrize("window", [None, 40])
def test_reference_split_path_is_batch_invariant(window):
    """batch_invariant=True: the same numbers as the dense path, and each row's bits do not
    depend on the others (here a row alone vs next to rows up to 3000 keys long)."""
    gen = torch.Generator().manual_seed(3)
    lens = [5, 700, 33, 3000, 260, 0, 256]
    clean, _, tables, sl = _paged_setup(lens, 16, 2, 32, torch.float32, gen)
    query = torch.randn(len(lens), 6, 32, generator=gen).to(DEVICE)
    split = paged_decode_attention_ref(query, clean, tables, sl, 0.2, window, batch_invariant=True)
    torch.testing.assert_close(split, paged_decode_attention_ref(query, clean, tables, sl, 0.2, window),
                               atol=1e-5, rtol=1e-5)
    for i in range(len(lens)):
        alone = paged_decode_attention_ref(query[i:i + 1], clean, tables[i:i + 1], sl[i:i + 1], 0.2, window,
                                           batch_invariant=True)
        assert torch.equal(alone[0], split[i])


def test_empty_inputs():
    cache = torch.zeros(2, 3, 16, 1, 32, device=DEVICE)
    tables = torch.zeros(0, 2, dtype=torch.int32, device=DEVICE)
    lens = torch.zeros(0, dtype=torch.int32, device=DEVICE)
    assert kernels.paged_decode_attention(torch.zeros(0, 2, 32, device=DEVICE), cache, tables, lens, 1.0,
                                          None).shape == (0, 2, 32)
    starts = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    assert kernels.paged_prefill_attention(torch.zeros(0, 2, 32, device=DEVICE), cache, tables, starts, lens, 0, 1.0,
                                           None).shape == (0, 2, 32)


def test_signatures_match_references():
    from deepinfer.ops.triton.paged_attention import paged_decode_attention, paged_prefill_attention

    for fn, ref in ((paged_decode_attention, paged_decode_attention_ref),
                    (paged_prefill_attention, paged_prefill_attention_ref)):
        got, want = inspect.signature(fn).parameters, inspect.signature(ref).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == \
               [(p.name, p.kind, p.default) for p in want.values()]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_realistic_shapes_on_gpu(dtype):
    # Default tile and split sizes, head_dim 128, lengths spanning many 256-key splits.
    _check_decode([1, 16, 255, 256, 257, 1500, 0, 3000], group=4, window=None, dtype=dtype, head_dim=128, kv_heads=8)
    _check_decode([1, 700, 0, 3000], group=8, window=1000, dtype=dtype, head_dim=128, kv_heads=4)
    _check_prefill([(1000, 300), (257, 257), (3000, 1), (40, 0), (700, 64)], group=4, window=None, dtype=dtype,
                   head_dim=128, kv_heads=8)
    _check_prefill([(1000, 300), (257, 257), (3000, 1)], group=8, window=200, dtype=dtype, head_dim=128, kv_heads=4)
    fp8 = torch.float8_e4m3fn
    _check_decode([1, 16, 257, 1500, 0, 3000], group=4, window=None, dtype=dtype, head_dim=128, kv_heads=8,
                  cache_dtype=fp8)
    _check_prefill([(1000, 300), (257, 257), (3000, 1)], group=4, window=None, dtype=dtype, head_dim=128, kv_heads=8,
                   cache_dtype=fp8)


@pytest.mark.gpu
def test_decode_replays_in_cuda_graph():
    # Captured once; replays must follow the new seq_lens/block_tables written in place.
    gen = torch.Generator().manual_seed(2)
    clean, _, tables, lens = _paged_setup([300, 17, 0, 600], 16, 2, 128, torch.bfloat16, gen, spare_cols=8)
    query = torch.randn(4, 8, 128, generator=gen).to(torch.bfloat16).to(DEVICE)
    kernels.paged_decode_attention(query, clean, tables, lens, 0.1, None)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernels.paged_decode_attention(query, clean, tables, lens, 0.1, None)
    for new_lens in ([300, 17, 0, 600], [0, 700, 5, 1]):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.testing.assert_close(out, paged_decode_attention_ref(query, clean, tables, lens, 0.1, None),
                                   **_tolerance(torch.bfloat16))
