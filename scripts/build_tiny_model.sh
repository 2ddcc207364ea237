#!/usr/bin/env bash
# Rebuild the embedded default model and its synthetic data (verl_lite/assets/) with the repo's venv.
# Extra arguments go to scripts/build_tiny_model.py (e.g. --sft_steps 200 for a quick try).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python scripts/build_tiny_model.py "$@"
