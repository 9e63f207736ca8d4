#!/usr/bin/env bash
# The H200 runs behind docs/PERFORMANCE.md, in parts that each fit one device call.
# Usage (on the GPU machine, from the repo root): scripts/h200_bench.sh PART OUT_DIR
#   tests    GPU tests
#   latency  batch-1 decode (published run with the transformers baseline), then profiled
#            runs with async scheduling off and on (device idle share)
#   bf16     1000 x 1000/1000 throughput, bf16
#   fp8      1000 x 1000/1000 throughput, fp8 weights; 1000 x 128/128 with the baseline
#   overlap  batch-256 decode: throughput and device idle with async scheduling on and off
#   fp8kv    1000 x 1000/1000 with an fp8 KV cache, bf16 weights and fp8 weights
#   issue4   batch-256 decode throughput with async scheduling off and on (no profiler), and the
#            GPU tests of async scheduling, the sync-free launch and batch-invariant mode
set -uo pipefail
part=$1 out=$2
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 DEEPINFER_TQDM=0
bench() { python3 -m deepinfer.entrypoints.cli bench "$@" --model llama3-8b --load-format dummy --dtype bfloat16 2>&1 \
  | grep -v -E "Loading|Processed|UserWarning|_warn_once" ; }
case $part in
tests)
  python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -25 ;;
latency)
  bench latency --num-iters 3 --num-iters-warmup 1 --compare-hf --roofline --output "$out/latency_bs1.json"
  for mode in no-async-scheduling async-scheduling; do
    bench latency --num-iters 1 --num-iters-warmup 1 --$mode --profile-steps 100 --profile-skip-steps 100 \
      --output "$out/latency_bs1_profile_$mode.json" | grep -E "profile of|TPOT|step split"
  done ;;
bf16)
  bench throughput --roofline --output "$out/throughput_1000_bf16.json" ;;
fp8)
  bench throughput --quantization fp8 --roofline --output "$out/throughput_1000_fp8.json"
  bench throughput --input-len 128 --output-len 128 --compare-hf --hf-num-prompts 128 --roofline \
    --output "$out/throughput_128_bf16.json" ;;
overlap)
  for mode in no-async-scheduling async-scheduling; do
    bench throughput --num-prompts 256 --input-len 1000 --output-len 200 --$mode --profile-steps 30 \
      --profile-skip-steps 160 --output "$out/decode256_$mode.json" | grep -E "deepinfer:|profile of|step split|^ +[0-9.]+ +[0-9.]+ +[0-9.]+  (_decode|nvjet)" | head -12
  done ;;
issue4)
  python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "async or never_waits or batch_invariant" 2>&1 | tail -5
  for mode in no-async-scheduling async-scheduling; do
    bench throughput --num-prompts 256 --input-len 1000 --output-len 200 --$mode \
      --output "$out/decode256_$mode.json" | grep -E "deepinfer:|step split"
  done ;;
fp8kv)
  bench throughput --kv-cache-dtype fp8 --roofline --output "$out/throughput_1000_bf16_fp8kv.json"
  bench throughput --kv-cache-dtype fp8 --quantization fp8 --roofline --output "$out/throughput_1000_fp8_fp8kv.json" ;;
esac
