#!/bin/bash
# Issue 62's real-model runs, part 3 (same settings as longctx_round3.sh; added once parts 1-2
# turned out cheaper than the pilot's estimate under load, before any of their tables was made):
# 20 niah_single items at 4096 context tokens (niah_multikey at 2048 is left out: the budget).
#   /tmp/q/heavy bash -c "source .venv/bin/activate && plugins/capkv/benchmarks/longctx_round3c.sh"
set -e
B=plugins/capkv/benchmarks/longctx_bench.py
R=plugins/capkv/results/records
ARMS=capkv,leverage,snapkv,streaming,h2o,knorm,random,capkv_tau1,capkv_tau2,capkv_tau10
COMMON="--ratios 0.25,0.5,0.75 --policies $ARMS --threads 1"
python $B run --lengths 4096 --tasks niah_single --n 20 --modes agnostic \
    --dtype bfloat16 $COMMON --out $R/longctx_c.jsonl
