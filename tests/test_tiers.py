"""The tiers' guard (tests/conftest.py): what would slow the fast tier fails an unmarked test, so
`make unit` stays fast by rule. These tests are unmarked themselves, so the guard is live here."""

from __future__ import annotations

import subprocess
import sys

import pytest
from moto import mock_aws

from local.cloudformation import Stack


def test_an_unmarked_test_that_starts_a_process_fails():
    with pytest.raises(pytest.fail.Exception, match="starts a process without @pytest.mark.server"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_an_unmarked_test_that_builds_the_whole_stack_fails_and_one_table_is_allowed():
    with mock_aws():
        stack = Stack.load(parameters={"ExistingEndpointName": "decision-endpoint"})
        with pytest.raises(pytest.fail.Exception, match="builds the whole stack in moto without @pytest.mark.stack"):
            stack.create()
        stack.create(only=["AuditTable"])  # what a test of one adapter needs: allowed
        assert stack.ref("AuditTable").startswith(stack.stack_name)


def test_an_unmarked_test_that_loads_the_model_fails(tmp_path):
    from decision_server.llama import LlamaModel

    with pytest.raises(pytest.fail.Exception, match="loads the model without @pytest.mark.model"):
        LlamaModel(tmp_path / "any.gguf")


@pytest.mark.server
def test_a_marked_test_may_start_its_process():
    assert subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True).stdout == "ran\n"
