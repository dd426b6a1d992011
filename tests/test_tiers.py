"""The tiers' guard (tests/conftest.py): what would slow the fast tier fails an unmarked test, so
`make unit` stays fast by rule. These tests are unmarked themselves, so the guard is live here."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from moto import mock_aws

from local.cloudformation import Stack
from training import learn
from training.learn import baseline_probabilities  # by name, as a module of the fitter might


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


def tickets(n: int) -> learn.Signals:
    """n one-line tickets of two answers, told apart by a word (the text is all the classifier reads)."""
    states = [{"body": f"{'refund' if i % 2 else 'outage'} ticket {i}"} for i in range(n)]
    return learn.Signals.build(states, np.zeros((n, 1)), [np.zeros(2)] * n, np.arange(n) % 2, [str(i) for i in range(n)],
                               ["body"], [], encoder=None)


def test_an_unmarked_test_may_fit_the_comparison_classifier_on_300_rows_and_no_more():
    signals = tickets(310)
    probabilities = learn.baseline_probabilities(signals, range(300), range(300, 310), 2)
    assert probabilities.argmax(axis=1).tolist() == [0, 1] * 5
    with pytest.raises(pytest.fail.Exception, match="on 301 training rows without @pytest.mark.fit"):
        learn.baseline_probabilities(signals, range(301), range(301, 310), 2)


def test_the_comparison_classifier_held_by_name_is_guarded_too():
    assert baseline_probabilities is learn.baseline_probabilities
    with pytest.raises(pytest.fail.Exception, match="fits the comparison classifier .* on 301 training rows without @pytest.mark.fit"):
        baseline_probabilities(tickets(310), np.arange(301), np.arange(301, 310), 2)


@pytest.mark.fit
def test_a_fit_test_gets_the_comparison_classifier_itself():
    assert not hasattr(learn.baseline_probabilities, "unguarded")
    assert baseline_probabilities is learn.baseline_probabilities
