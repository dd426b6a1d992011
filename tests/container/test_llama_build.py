"""The llama.cpp build: portable, never for the build host, and it runs the CPU's own kernels.

These run against the llama-cpp-python that `make` installed (container/llama-build.sh), on
whatever CPU this machine has: an AVX2-only one and an AVX-512/AMX one are both covered by the
same assertions (what the CPU reports decides which variant must be chosen).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from decision_server import ggml_backends
from local.services import DecisionContainer, ServiceError, exit_description

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "container" / "llama-build.sh"

#: ggml's feature names (ggml_backend_get_features) -> the /proc/cpuinfo flag the CPU must report.
CPUINFO_FLAG = {
    "SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX_VNNI": "avx_vnni", "AVX2": "avx2", "F16C": "f16c",
    "FMA": "fma", "BMI2": "bmi2", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
}


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split())


def decision_body() -> dict:
    return {"decision": {"id": "build", "state": "The invoice shows a double charge.", "question": "Which queue?",
                         "options": [{"id": "billing", "description": "Billing"}, {"id": "tech", "description": "Tech"}]}}


def serve_and_decide(tmp_path: Path, settings: dict[str, str] | None = None) -> dict:
    """The real server in a subprocess on this CPU: /ping's report once it decided once."""
    with DecisionContainer(tmp_path / "server.log", settings={"LOG_LEVEL": "WARNING", **(settings or {})}) as server:
        server.wait_ready(timeout=300)  # a crash raises at once, naming the signal (not a hang)
        response = httpx.post(f"{server.url}/invocations", json=decision_body(), timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["result"]["option_ids"] == ["billing", "tech"]
        return httpx.get(f"{server.url}/ping", timeout=10).json()["llama_build"]


@pytest.mark.model
@pytest.mark.server
def test_the_real_server_decides_on_this_cpu_with_the_best_variant_it_supports(tmp_path):
    build = serve_and_decide(tmp_path)
    assert build["dynamic_backends"] and build["chosen_by"] == "score"
    assert build["cpu_variant"] in build["cpu_variants_available"]
    assert {"x64", "haswell", "skylakex", "icelake", "sapphirerapids"} <= set(build["cpu_variants_available"])
    flags = cpu_flags()
    # Never an instruction this CPU lacks ...
    missing = [f for f in build["cpu_features"] if f in CPUINFO_FLAG and CPUINFO_FLAG[f] not in flags]
    assert not missing, f"the {build['cpu_variant']} variant uses {missing}, which this CPU does not report"
    # ... and the widest vectors it has.
    if {"avx2", "fma", "f16c", "bmi2"} <= flags:
        assert "AVX2" in build["cpu_features"], build
    if {"avx512f", "avx512vbmi", "avx512_vnni"} <= flags:
        assert {"AVX512", "AVX512_VBMI", "AVX512_VNNI"} <= set(build["cpu_features"]), build
    assert build["cpu_variant"] not in ggml_backends.OPT_IN_VARIANTS  # AMX only when asked for
    assert "CPU" in build["backends"] and "CPU :" in build["system_info"]


@pytest.mark.model
@pytest.mark.server
def test_a_variant_chosen_by_setting_runs_and_is_reported(tmp_path):
    build = serve_and_decide(tmp_path, {"DECISION_CPU_VARIANT": "haswell"})
    assert (build["cpu_variant"], build["chosen_by"]) == ("haswell", "setting")
    assert "AVX2" in build["cpu_features"] and "AVX512" not in build["cpu_features"]


@pytest.mark.server
def test_an_unknown_variant_stops_start_up_with_the_variants_there_are(tmp_path):
    server = DecisionContainer(tmp_path / "server.log", settings={"DECISION_CPU_VARIANT": "pentium4"})
    with server, pytest.raises(ServiceError, match="exited with status 2") as failure:
        server.wait_ready(timeout=120)
    assert "DECISION_CPU_VARIANT=pentium4 is not among this build's CPU variants: " in failure.value.args[0]
    assert "haswell" in failure.value.args[0]


def test_a_crash_names_its_signal():
    assert exit_description(-4) == "was killed by SIGILL (Illegal instruction)"
    assert exit_description(2) == "exited with status 2"


def _instructions(library: Path) -> str:
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          check=True, timeout=300).stdout


@pytest.mark.server  # runs a script or a command as a process
def test_the_libraries_outside_the_cpu_variants_use_only_the_x86_64_baseline():
    """libllama and ggml's core are compiled for no particular CPU: every instruction beyond
    SSE2 lives in a CPU variant, which is loaded only where the CPU has it."""
    lib = ggml_backends.LIB_DIR
    for name in ("libllama.so", "libggml.so", "libggml-base.so"):
        code = _instructions(lib / name)
        beyond = [m for m in ("%ymm", "%zmm", "tileloadd", "tdpbssd", "vfmadd") if m in code]
        assert not beyond, f"{name} carries {beyond}: it was built for a specific CPU, not portably"


@pytest.mark.server  # runs a script or a command as a process
def test_each_cpu_variant_stays_within_its_instruction_set():
    lib = ggml_backends.LIB_DIR
    assert "%ymm" not in _instructions(lib / "libggml-cpu-x64.so")
    haswell = _instructions(lib / "libggml-cpu-haswell.so")
    assert "%ymm" in haswell and "%zmm" not in haswell
    assert "%zmm" in _instructions(lib / "libggml-cpu-skylakex.so")


def test_the_process_loads_one_cpu_variant_from_the_wheel():
    # Idempotent: in a test session the first caller (an engine, or this test) loaded it.
    build = ggml_backends.load()
    assert build.dynamic_backends
    assert build.cpu_variants_available == ggml_backends.available_variants()


# --- the build script ---------------------------------------------------------------------------

def build_script(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DECISION_WHEEL_CACHE": str(cache)}
    return subprocess.run(["bash", str(BUILD_SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.server  # runs a script or a command as a process
def test_the_build_flags_are_part_of_the_wheel_key(tmp_path):
    cpu = build_script("--print-key", cache=tmp_path).stdout.strip()
    cuda = build_script("--print-key", "--variant", "cuda", cache=tmp_path).stdout.strip()
    assert re.fullmatch(r"0\.3\.36-cpu-[0-9a-f]{12}", cpu) and re.fullmatch(r"0\.3\.36-cuda-[0-9a-f]{12}", cuda)
    assert cpu.split("-")[-1] != cuda.split("-")[-1]


@pytest.mark.server  # runs a script or a command as a process
def test_a_missing_wheel_is_compiled_portably_and_never_from_pips_cache(tmp_path):
    run = build_script("--python", sys.executable, "--dry-run", cache=tmp_path)
    assert run.returncode == 0, run.stderr
    plan = run.stdout
    compile_line = next(line for line in plan.splitlines() if " pip wheel " in line)
    for flag in ("-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "--no-binary llama-cpp-python",
                 "--no-cache-dir", "llama-cpp-python==0.3.36"):
        assert flag in compile_line, compile_line
    assert "-march=native" not in plan and "GGML_NATIVE=ON" not in plan
    assert f"{sys.executable} -m pip uninstall --quiet --yes llama-cpp-python" in plan


@pytest.mark.server  # runs a script or a command as a process
def test_a_cached_wheel_of_the_same_key_is_installed_without_compiling(tmp_path):
    key = build_script("--print-key", cache=tmp_path).stdout.strip()
    wheel = tmp_path / key / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    plan = build_script("--python", sys.executable, "--dry-run", cache=tmp_path).stdout
    assert f"build {key}: cached wheel in {wheel.parent}" in plan
    assert " pip wheel " not in plan
    assert f"-m pip install --quiet {wheel}" in plan
    # A wheel left under another key (other flags) is never taken.
    other = tmp_path / "0.3.36-cpu-000000000000" / wheel.name
    other.parent.mkdir()
    wheel.rename(other)
    assert " pip wheel " in build_script("--python", sys.executable, "--dry-run", cache=tmp_path).stdout


def test_every_install_path_builds_through_the_one_script():
    makefile = (ROOT / "Makefile").read_text()
    install = (ROOT / "container" / "install.sh").read_text()
    assert "bash container/llama-build.sh --python $(PY)" in makefile
    assert '"$ROOT/container/llama-build.sh" --python "$PREFIX/venv/bin/python" --variant "$VARIANT"' in install
    assert "CMAKE_ARGS" not in install  # the flags live in llama-build.sh alone
    assert "container/llama-build.sh" in (ROOT / "container" / "Dockerfile").read_text()
