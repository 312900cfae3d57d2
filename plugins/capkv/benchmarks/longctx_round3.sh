#!/bin/bash
# Issue 62's real-model runs (SmolLM2-135M-Instruct), part 1 of 2 (part 2: longctx_round3b.sh;
# the two run side by side in the machine-wide queue's two slots). Settings fixed before the
# run; run from the repository root in the project's environment:
#   /tmp/q/heavy bash -c "source .venv/bin/activate && plugins/capkv/benchmarks/longctx_round3.sh"
# Each run appends one JSON line per item (a rerun skips finished items); the tables are made
# afterwards by `longctx_bench.py table` / `fidelity-table` (seconds), see the README.
set -e
B=plugins/capkv/benchmarks/longctx_bench.py
R=plugins/capkv/results/records
ARMS=capkv,leverage,snapkv,streaming,h2o,knorm,random,capkv_tau1,capkv_tau2,capkv_tau10
COMMON="--ratios 0.25,0.5,0.75 --policies $ARMS --threads 1"
python $B run --lengths 1024 --tasks niah_single --n 50 --modes agnostic \
    --dtype bfloat16 $COMMON --out $R/longctx.jsonl
python $B run --lengths 1024 --tasks niah_single --n 4 --modes agnostic \
    --dtype float32 $COMMON --out $R/longctx_fp32.jsonl
python $B fidelity --context 1024 --n 20 --dtype bfloat16 $COMMON --out $R/fidelity.json
