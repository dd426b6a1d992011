"""template.yaml and the routing ASL pass the linters, inside the suite (`make lint` runs the
same three tools from the command line)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cfnlint.api import ManualArgs, lint_file

from local.cloudformation import REPO_ROOT, TEMPLATE_PATH, Stack, statelint_problems

SAM = REPO_ROOT / ".venv-sam" / "bin" / "sam"


def test_cfn_lint_finds_nothing():
    matches = lint_file(Path(TEMPLATE_PATH), config=ManualArgs(regions=["us-east-1"]))
    assert [str(m) for m in matches] == []


@pytest.mark.parametrize("parameters", [
    {},  # the defaults stand for an existing-endpoint deploy once ExistingEndpointName is set
    {"ExistingEndpointName": "decision-endpoint"},
    {"DecisionImageUri": "1.dkr.ecr.us-east-1.amazonaws.com/d@sha256:" + "a" * 64,
     "ModelDataUrl": "s3://bucket/model.tar.gz", "EndpointCompute": "GPU"},
], ids=["defaults", "existing-endpoint", "gpu-endpoint"])
def test_statelint_passes_on_the_substituted_definition(parameters):
    problems = statelint_problems(Stack.load(parameters=parameters))
    assert problems == {"RoutingStateMachine": []}


def test_statelint_really_checks_the_definition(tmp_path):
    """The statelint step is not vacuous: a dangling Next in a copy of the ASL is reported."""
    (tmp_path / "statemachine").mkdir()
    asl = (REPO_ROOT / "statemachine" / "routing.asl.json").read_text()
    (tmp_path / "statemachine" / "routing.asl.json").write_text(asl.replace('"Next": "CheckEscalation"', '"Next": "Nowhere"'))
    shutil.copy(TEMPLATE_PATH, tmp_path / "template.yaml")
    problems = statelint_problems(Stack.load(tmp_path / "template.yaml"))
    assert any("Nowhere" in p for p in problems["RoutingStateMachine"])


@pytest.mark.sam
@pytest.mark.skipif(not SAM.exists(), reason="aws-sam-cli lives in .venv-sam, installed by `make lint` (it pins an older boto3)")
def test_sam_validate_lint_passes():
    result = subprocess.run(
        [str(SAM), "validate", "--lint", "--template", str(TEMPLATE_PATH), "--region", "us-east-1"],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout
