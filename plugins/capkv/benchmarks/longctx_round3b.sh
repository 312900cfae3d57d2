#!/bin/bash
# Issue 62's real-model runs, part 2 of 2 (see longctx_round3.sh; same settings):
#   /tmp/q/heavy bash -c "source .venv/bin/activate && plugins/capkv/benchmarks/longctx_round3b.sh"
set -e
B=plugins/capkv/benchmarks/longctx_bench.py
R=plugins/capkv/results/records
ARMS=capkv,leverage,snapkv,streaming,h2o,knorm,random,capkv_tau1,capkv_tau2,capkv_tau10
COMMON="--ratios 0.25,0.5,0.75 --policies $ARMS --threads 1"
python $B run --lengths 1024 --tasks niah_multikey --n 50 --modes agnostic \
    --dtype bfloat16 $COMMON --out $R/longctx_b.jsonl
python $B run --lengths 2048 --tasks niah_single --n 20 --modes agnostic \
    --dtype bfloat16 $COMMON --out $R/longctx_b.jsonl
