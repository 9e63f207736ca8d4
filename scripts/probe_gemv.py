"""Probe: a Triton split-N GEMV (batch 1..4) against cuBLAS at Llama-3-8B's decode shapes."""
import torch, triton, triton.language as tl
import torch.nn.functional as F


@triton.jit
def _gemv(x_ptr, w_ptr, out_ptr, N, K, M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    ks = tl.arange(0, BLOCK_K)
    for m in tl.static_range(M):
        acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            w = tl.load(w_ptr + rows[:, None].to(tl.int64) * K + (k0 + ks)[None, :], mask=rmask[:, None], other=0.0)
            x = tl.load(x_ptr + m * K + k0 + ks)
            acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        tl.store(out_ptr + m * N + rows, tl.sum(acc, 1).to(out_ptr.dtype.element_ty), mask=rmask)


def gemv(x, w, block_n, block_k, warps, stages):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    _gemv[(triton.cdiv(N, block_n),)](x, w, out, N, K, M=M, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
                                      num_stages=stages)
    return out


shapes = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
for M in (1,):
    for name, (N, K) in shapes.items():
        ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(4 if N * K < 2e8 else 1)]
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        ref = F.linear(x, ws[0])
        i = [0]

        def nxt():
            i[0] = (i[0] + 1) % len(ws)
            return ws[i[0]]
        t_cublas = triton.testing.do_bench(lambda: F.linear(x, nxt()), warmup=25, rep=100, return_mode="median")
        best = None
        for bn in (4, 8, 16):
            for bk in (256, 512):
                for warps in (4, 8):
                    for stages in (2, 3):
                        try:
                            got = gemv(x, ws[0], bn, bk, warps, stages)
                            err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
                            if err > 1e-2:
                                continue
                            t = triton.testing.do_bench(lambda: gemv(x, nxt(), bn, bk, warps, stages), warmup=10, rep=40,
                                                        return_mode="median")
                        except Exception:
                            continue
                        if best is None or t < best[0]:
                            best = (t, bn, bk, warps, stages)
        gb = N * K * 2 / 1e9
        print(f"M={M} {name:8s} cublas {t_cublas*1e3:7.1f} us ({gb/t_cublas*1e3:5.0f} GB/s)  triton {best[0]*1e3:7.1f} us "
              f"({gb/best[0]*1e3:5.0f} GB/s) cfg {best[1:]}", flush=True)
