#!/usr/bin/env bash
# Profile Llama-3.1-8B at TP 1/2/4/8 on ONE H200 (collectives stubbed) into datasets/profiles/h200/.
#
#   scripts/profile_h200.sh              # dry run (grid size, estimate), then the sweep
#   OUT=/tmp/p BUDGET_MS=100 scripts/profile_h200.sh
#   BACKEND=torch scripts/profile_h200.sh   # plain torch kernels even where vLLM is installed
#
# Kernels (BACKEND): "auto" (default) = vLLM's own kernels when `vllm._custom_ops` imports,
# else torch; or torch | vllm | flashinfer. A non-torch backend times the families it has
# kernels for (vllm: elementwise, attention; flashinfer: attention) and torch the rest
# (GEMMs: vLLM's unquantized linear is F.linear); every row names its backend and kernel.
# Each backend gets its own profile root (datasets/profiles/h200-<backend>) so that one
# calibration never mixes two engines' attention kernels.
#
# Grid: bench/h200_llama8b_grid.yaml. Both timing modes per operator (kernel: CUDA-graph replay,
# cold L2; launch: eager). The sweep is resumable: if the time limit below stops it, rerun this
# script and it continues with the chunks not yet written. Target: well under 8 minutes.
# Measured on an H200 (2026-12-01, torch 2.11.0+cu130): the 500 points of Llama-3.1-8B in 65 s
# (--dry-run estimates 72 s), its 4 memory runs (a fresh process each) in 23 s; those rows are
# committed under datasets/profiles/h200 with Qwen3-32B's and Qwen3-30B-A3B's (MODEL=... FAMILIES=...).
#
# MODEL may be a config.json folder (a machine without the aiconfigurator-core package, which holds
# the catalogue's Llama config): rows then name the model by the folder ("Llama-3.1-8B"), which the
# simulator matches to "meta-llama/Llama-3.1-8B". OUT is the profile root: where a tool sets OUT
# for its own use, give it on the command line (OUT=datasets/profiles/h200 scripts/profile_h200.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
BACKEND=${BACKEND:-auto}
if [ "$BACKEND" = auto ]; then
    BACKEND=$("$PY" -c "import vllm._custom_ops" >/dev/null 2>&1 && echo vllm || echo torch)
fi
OUT=${OUT:-datasets/profiles/h200$( [ "$BACKEND" = torch ] || echo "-$BACKEND" )}
MODEL=${MODEL:-meta-llama/Llama-3.1-8B}
FAMILIES=${FAMILIES:-linear,attention,elementwise,memory}
WARMUP_MS=${WARMUP_MS:-10}
BUDGET_MS=${BUDGET_MS:-50}
LIMIT_S=${LIMIT_S:-450}                          # stop (resumably) before 8 minutes

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible to torch')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

ARGS=(--model "$MODEL" --tensor-parallel-size 1,2,4,8 --families "$FAMILIES" --device cuda --gpu H200
      --dtype bf16 --grid bench/h200_llama8b_grid.yaml --warmup-ms "$WARMUP_MS" --budget-ms "$BUDGET_MS"
      --backend "$BACKEND" --out "$OUT")
echo "profile_h200: backend $BACKEND -> $OUT"
"$PY" -m frontier.cli profile "${ARGS[@]}" --dry-run
start=$(date +%s)
set +e
timeout --signal=INT "$LIMIT_S" "$PY" -m frontier.cli profile "${ARGS[@]}"
rc=$?
set -e
echo "profile_h200: exit $rc after $(( $(date +%s) - start )) s; rows under $OUT"
if [ "$rc" = 124 ]; then echo "profile_h200: time limit hit; rerun to resume" >&2; fi
exit "$rc"
