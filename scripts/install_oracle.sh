#!/usr/bin/env bash
# Install the vLLM 0.33 and SGLang 0.5.23 scheduler oracles (tests/oracle) into a Python
# venv, CPU only.
#
# Usage: scripts/install_oracle.sh [VENV_PYTHON]     (default: .venv/bin/python)
#
# Idempotent: each step is skipped when already satisfied. Installs
#   1. torch==2.13.0, the CPU build ("+cpu"), unless torch is already importable.
#      A CUDA torch is never installed: the +cpu local version is required and
#      torch is pinned by a constraint while everything else is installed.
#   2. vllm==0.33.0 with --no-deps (its pins would pull torch 2.14 + CUDA).
#   3. The pure-Python packages its scheduler import path (and ModelConfig's
#      architecture inspection, a subprocess importing the model module) needs, found by
#      trying imports in a fresh venv (tests/oracle/vllm_driver.py); xgrammar
#      with --no-deps so that triton (~1 GB, unused on a CPU) stays out.
#   4. sglang==0.5.23 with --no-deps (its pins would pull torch 2.14.1, CUDA kernels,
#      flashinfer, ...), then the pure-Python packages the SGLang scheduler's import path
#      needs beyond step 3's, found by trying imports (tests/oracle/sglang_driver.py),
#      pinned where sglang's metadata pins them. triton and torchvision stay out: the
#      driver serves stubs for their module-level imports.
# vLLM pins torch==2.14.0 and SGLang torch==2.14.1 (and other versions: transformers,
# openai, xgrammar); pip's "incompatible"/"requires" warnings about them are expected.
set -euo pipefail

PY="${1:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}"
if [[ ! -x "$PY" ]]; then
    echo "install_oracle: no python at '$PY' (pass a venv python as \$1)" >&2
    exit 2
fi
PIP=("$PY" -m pip --disable-pip-version-check)
start_s=$(date +%s)

# The scheduler path's imports, pinned to what vLLM 0.33.0's metadata asks for.
ORACLE_DEPS=(
    "packaging"
    "numpy"
    "regex"
    "psutil"
    "cbor2"
    "cachetools"
    "cloudpickle"
    "msgspec"
    "pyzmq>=25.0.0"
    "pybase64"
    "py-cpuinfo"
    "pyyaml"
    "pillow>=13.0.0"
    "uvloop"
    "urllib3"
    "requests>=2.33.0"
    "aiohttp>=3.14.4"
    "pydantic>=2.12.0"
    "prometheus_client>=0.18.0"
    "partial-json-parser"
    "transformers>=5.16.1,<5.21.0"
    "huggingface_hub>=1.31.0"
    "openai>=2.25.0"
    "openai-harmony"
    "fastapi>=0.133.0,<0.137.0"
    "apache-tvm-ffi>=0.1.11"
    "llguidance>=1.7.0,<1.8.0"
    "einops"        # ModelConfig inspects the architecture by importing its model module
)
# xgrammar is imported but never used here; its triton dependency (~1 GB) is not.
NO_DEPS=("xgrammar==0.2.8")

# What SGLang 0.5.23's scheduler import path adds to the above (pins from its metadata;
# dill is not in it, it comes with its `datasets` dependency).
SGLANG_DEPS=(
    "orjson"
    "setproctitle"
    "IPython"
    "dill"
    "sentencepiece==0.2.1"
    "compressed-tensors==0.18.0"
    "gguf"
    "uvicorn>=0.51"
)

# 1. torch (CPU).
if "$PY" -c "import torch" 2>/dev/null; then
    echo "install_oracle: torch $("$PY" -c 'import torch; print(torch.__version__)') already importable, kept"
else
    "${PIP[@]}" install "torch==2.13.0+cpu"
fi
if [[ "$("$PY" -c 'import torch; print(torch.version.cuda)')" != "None" ]]; then
    echo "install_oracle: warning: the torch in this venv is a CUDA build (kept as found)" >&2
fi
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__)')"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==${TORCH_VERSION}" > "$constraints"

# NAME==VERSION without its dependency pins, unless that version is installed.
install_no_deps() {
    if [[ "$("$PY" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p')" == "$2" ]]; then
        echo "install_oracle: $1 $2 already installed"
    else
        "${PIP[@]}" install --no-deps "$1==$2"
    fi
}

# 2. vLLM itself, without its dependency pins.
install_no_deps vllm 0.33.0

# 3. What the scheduler path imports (pip skips what is already satisfied).
"${PIP[@]}" install -c "$constraints" "${ORACLE_DEPS[@]}" 2>&1 \
    | grep -v -e "is ignored: it is neither" -e "^Requirement already satisfied" \
        -e "vllm 0.33.0 requires" -e "ERROR: pip's dependency resolver" || true
"${PIP[@]}" install --no-deps "${NO_DEPS[@]}" 2>&1 \
    | grep -v -e "is ignored: it is neither" -e "^Requirement already satisfied" || true

# 4. SGLang itself, without its dependency pins, then what its scheduler path imports.
install_no_deps sglang 0.5.23
"${PIP[@]}" install -c "$constraints" "${SGLANG_DEPS[@]}" 2>&1 \
    | grep -v -e "is ignored: it is neither" -e "^Requirement already satisfied" \
        -e "vllm 0.33.0 requires" -e "sglang 0.5.23 requires" -e "ERROR: pip's dependency resolver" || true

# Check: the drivers' imports work (and SGLang's scheduler runs one request).
"$PY" - <<'EOF'
import torch
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: F401
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: F401
from vllm.config import VllmConfig  # noqa: F401
import vllm.model_executor.models.llama  # noqa: F401  (what ModelConfig's architecture inspection imports)
import vllm
print(f"install_oracle: ok: vllm {vllm.__version__}, torch {torch.__version__} (cuda={torch.version.cuda})")
EOF
ORACLE_DIR="$(cd "$(dirname "$0")/../tests/oracle" && pwd)"
if ! sglang_check="$(PYTHONPATH="$ORACLE_DIR${PYTHONPATH:+:$PYTHONPATH}" "$PY" - 2>&1 <<'EOF'
import warnings
warnings.simplefilter("ignore")
import sglang_driver  # the stubs and every scheduler-path import
from sglang.version import __version__
steps = sglang_driver.run_sglang_scheduler(
    [sglang_driver.SglRequest("r", (1, 2, 3), 2)], max_total_tokens=64
)
assert [s.kind for s in steps] == ["prefill", "decode"], steps
print(f"install_oracle: ok: sglang {__version__}, its scheduler runs on the CPU")
EOF
)"; then
    echo "$sglang_check" >&2
    echo "install_oracle: the SGLang oracle does not work (output above)" >&2
    exit 1
fi
echo "$sglang_check" | grep "^install_oracle"
echo "install_oracle: done in $(( $(date +%s) - start_s )) s"
