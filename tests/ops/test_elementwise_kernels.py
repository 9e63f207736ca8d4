"""Triton kernels of the elementwise ops against their torch references (CPU interpreter)."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

pytest.importorskip("triton")

# The modules, not the public functions of the same names that deepinfer.ops exports.
rms_norm_mod = importlib.import_module("deepinfer.ops.rms_norm")
rotary_mod = importlib.import_module("deepinfer.ops.rotary_embedding")
silu_mod = importlib.import_module("deepinfer.ops.silu_and_mul")
kv_mod = importlib.import_module("deepinfer.ops.write_kv_cache")
fp8_mod = importlib.import_module("deepinfer.ops.quantize_fp8")


def triton_op(name: str):
    return getattr(importlib.import_module(f"deepinfer.ops.triton.{name}"), name)


DTYPES = [torch.float32, torch.float16]


@pytest.mark.parametrize("name, module", [("rms_norm", rms_norm_mod), ("rotary_embedding", rotary_mod),
                                          ("silu_and_mul", silu_mod), ("write_kv_cache", kv_mod)])
def test_signature_matches_reference(name, module):
    assert inspect.signature(triton_op(name)) == inspect.signature(getattr(module, f"{name}_ref"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, k, with_bias", [(40, 64, False), (33, 1000, True), (20000, 32, False)])
def test_gemv(dtype, n, k, with_bias):
    from deepinfer.ops.gemv import gemv_ref
    from deepinfer.ops.triton.gemv import gemv

    assert inspect.signature(gemv) == inspect.signature(gemv_ref)
    x, w = torch.randn(1, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    b = torch.randn(n, dtype=dtype) if with_bias else None
    torch.testing.assert_close(gemv(x, w, b).float(), gemv_ref(x.float(), w.float(), None if b is None else b.float()),
                               atol=2e-2 * k ** 0.5, rtol=1e-2)
    with pytest.raises(ValueError, match="one row"):
        gemv(torch.randn(2, k, dtype=dtype), w, b)


def test_quantize_fp8_per_token_matches_reference():
    from deepinfer.ops.triton.quantize_fp8 import quantize_fp8_per_token

    assert inspect.signature(quantize_fp8_per_token) == inspect.signature(fp8_mod.quantize_fp8_per_token_ref)
    # Rows of very different magnitude, one all zero, longer than one tile (two passes per row).
    x = torch.randn(4, 3000) * torch.tensor([[1e-3], [1.0], [0.0], [50.0]])
    q, scale = quantize_fp8_per_token(x.half())
    q_ref, scale_ref = fp8_mod.quantize_fp8_per_token_ref(x.half())
    torch.testing.assert_close(scale, scale_ref, rtol=1e-6, atol=0)
    assert q.dtype == q_ref.dtype == fp8_mod.FP8_DTYPE
    assert torch.equal(q[2].float(), torch.zeros(3000)), "a zero row stays zero"
    # Triton's interpreter emulates the float32 -> e4m3 cast and rounds some values just below a
    # power of two down to the power below (125.9 -> 64), which the hardware cast does not; so
    # here most values must agree exactly, and tests/ops/test_kernels_gpu.py checks all of them.
    same = q.float() == q_ref.float()
    assert same.float().mean() > 0.95


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype):
    x = torch.randn(5, 2 * 48, dtype=dtype)
    torch.testing.assert_close(triton_op("silu_and_mul")(x), silu_mod.silu_and_mul_ref(x), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm(dtype, with_residual):
    x = torch.randn(4, 96, dtype=dtype)
    w = torch.randn(96, dtype=dtype)
    r = torch.randn(4, 96, dtype=dtype) if with_residual else None
    got, want = triton_op("rms_norm")(x, w, 1e-6, r), rms_norm_mod.rms_norm_ref(x, w, 1e-6, r)
    if with_residual:
        torch.testing.assert_close(got[1], want[1], atol=0, rtol=0)
        got, want = got[0], want[0]
    torch.testing.assert_close(got, want, atol=2e-3 if dtype == torch.float16 else 1e-5, rtol=1e-3)


def test_rms_norm_per_head_weight():
    x = torch.randn(3, 4, 32)  # q/k norm: [T, heads, head_dim] with weight [head_dim]
    w = torch.randn(32)
    torch.testing.assert_close(triton_op("rms_norm")(x, w, 1e-6), rms_norm_mod.rms_norm_ref(x, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [32, 16])
def test_rotary(dtype, is_neox, rotary_dim):
    x = torch.randn(6, 3, 32, dtype=dtype)
    positions = torch.tensor([0, 5, 9, 1, 63, 2])
    freqs = torch.arange(64).float()[:, None] * (1.0 / 10000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
    cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    got = triton_op("rotary_embedding")(x, positions, cos_sin, is_neox)
    want = rotary_mod.rotary_embedding_ref(x, positions, cos_sin, is_neox)
    torch.testing.assert_close(got, want, atol=2e-3 if dtype == torch.float16 else 1e-6, rtol=1e-3)


def test_rotary_reads_a_strided_view_of_qkv():
    qkv = torch.randn(4, 5, 16)  # q and k heads are the first 4 of 5 (v last), as in the model
    positions = torch.tensor([3, 1, 0, 7])
    freqs = torch.arange(8).float()[:, None] * torch.rand(8)[None, :]
    cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    view = qkv[:, :4]
    torch.testing.assert_close(triton_op("rotary_embedding")(view, positions, cos_sin, True),
                               rotary_mod.rotary_embedding_ref(view, positions, cos_sin, True))


def test_write_kv_cache_ref_into_fp8_cache():
    cache = torch.zeros(2, 6, 4, 2, 8, dtype=torch.float8_e4m3fn)
    key, value = torch.randn(5, 2, 8), torch.randn(5, 2, 8)
    key[0, 0, 0], value[1, 1, 1] = 1e4, -1e4  # beyond e4m3's range: saturated, not NaN
    kv_mod.write_kv_cache_ref(key, value, cache, torch.tensor([4, 5, -1, 22, 9]))
    back = cache.float()
    assert not back.isnan().any()
    assert back[0].view(-1, 2, 8)[4, 0, 0] == 448 and back[1].view(-1, 2, 8)[5, 1, 1] == -448
    got, want = back[0].view(-1, 2, 8)[22], key[3]
    assert ((got - want).abs() <= want.abs() / 16 + 2 ** -9).all(), "within e4m3 rounding"
    assert back[0].view(-1, 2, 8)[[0, 1, 2, 3]].eq(0).all(), "untouched slots and the padding token's"


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_kv_cache_skips_padding_slots(dtype):
    kv_a = torch.zeros(2, 6, 4, 2, 8, dtype=dtype)
    kv_b = kv_a.clone()
    key, value = torch.randn(5, 2, 8, dtype=dtype), torch.randn(5, 2, 8, dtype=dtype)
    slots = torch.tensor([4, 5, -1, 22, 9])
    triton_op("write_kv_cache")(key, value, kv_a, slots)
    kv_mod.write_kv_cache_ref(key, value, kv_b, slots)
    assert torch.equal(kv_a, kv_b)
    assert torch.equal(kv_a[0].view(-1, 2, 8)[22], key[3]) and torch.equal(kv_a[1].view(-1, 2, 8)[9], value[4])


def test_exponential_race_kernel_matches_reference():
    from deepinfer.ops.exponential_race import exponential_race_ref, race_noise_ref
    from deepinfer.ops.triton.exponential_race import exponential_race
    from deepinfer.worker.model_runner import row_seed

    assert inspect.signature(exponential_race) == inspect.signature(exponential_race_ref)
    keys = torch.tensor([row_seed(s, i) for s in range(6) for i in range(6)], dtype=torch.long)
    probs = torch.randn(36, 5000).softmax(-1)  # more than one 4096-wide tile per row
    probs[3, :] = 0.0
    probs[3, 4500] = 1.0  # a row with one possible token, in the second tile
    got = exponential_race(probs, keys)
    assert torch.equal(got, exponential_race_ref(probs, keys)) and got[3] == 4500
    noise = race_noise_ref(keys, 5000)
    assert bool((noise > 0).all()) and bool(noise.isfinite().all())
    assert abs(noise.mean().item() - 1.0) < 0.01, "Exp(1) has mean 1"


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_batch_invariant_kernel(dtype):
    from deepinfer.ops.linear_batch_invariant import linear_batch_invariant_ref
    from deepinfer.ops.triton.linear_batch_invariant import linear_batch_invariant

    assert inspect.signature(linear_batch_invariant) == inspect.signature(linear_batch_invariant_ref)
    w, b = torch.randn(100, 150, dtype=dtype), torch.randn(100, dtype=dtype)
    x = torch.randn(70, 150, dtype=dtype)
    full = linear_batch_invariant(x, w, b)
    torch.testing.assert_close(full.float(), torch.nn.functional.linear(x.float(), w.float(), b.float()),
                               atol=2e-2, rtol=1e-2)
    for m in (1, 3, 64, 65):  # inside one row tile, exactly one, and across two
        assert torch.equal(linear_batch_invariant(x[:m], w, b), full[:m])
    perm = torch.randperm(70)
    assert torch.equal(linear_batch_invariant(x[perm], w, b), full[perm])
    for m in (1, 5, 17, 70):  # the reference is invariant too, by its fixed call shape
        assert torch.equal(linear_batch_invariant_ref(x[:m], w, b), linear_batch_invariant_ref(x, w, b)[:m])
