#!/usr/bin/env bash
# Rebuild the embedded models and their synthetic data (verl_lite/assets/) with the repo's venv: the tiny
# model, then the tool-using agent model fine-tuned from it (--target tiny / agent builds one of them;
# --target eval_agent only measures the saved agent model). Extra arguments go to
# scripts/build_tiny_model.py (e.g. --sft_steps 200 for a quick try).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python scripts/build_tiny_model.py "$@"
