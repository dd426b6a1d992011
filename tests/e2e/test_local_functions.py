"""The local functions run as Lambda runs them: each execution environment a process of its own,
with its own environment. This process's os.environ never changes while they work, so moto's Step
Functions interpreter, which reads it from its own threads here, never sees a function's variables
come and go (that once failed a workflow with States.Runtime 'POWERTOOLS_METRICS_NAMESPACE')."""

from __future__ import annotations

import os
import threading

import pytest

from local.items import read_items
from local.outcomes import report_line
from tests.e2e.conftest import UNUSED_ENDPOINT
from tests.e2e.test_demo_sources import line


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_functions_run_in_processes_of_their_own_and_leave_this_ones_environment_alone(local_pipeline, tmp_path):
    pipeline = local_pipeline(UNUSED_ENDPOINT)
    pids = {function.pid for function in pipeline.functions}
    assert os.getpid() not in pids and None not in pids and len(pids) == len(pipeline.functions)

    before = dict(os.environ)
    seen: list[dict[str, str]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.005):
            seen.append(dict(os.environ))

    items = tmp_path / "items.jsonl"
    items.write_text("\n".join([line("securityhub_findings_imported"),  # decided by rules: no model
                                line("zendesk_ticket_created", detail__description="")]) + "\n")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        outcomes = pipeline.run(read_items([items]))
    finally:
        done.set()
        watcher.join()
    assert [report_line(o)["outcome"] for o in outcomes] == ["routed", "dead_lettered"]
    assert seen and all(environ == before for environ in seen), "a function's variables reached this process"
    assert "AWS_LAMBDA_FUNCTION_NAME" not in os.environ


@pytest.mark.stack
@pytest.mark.server  # the moto server
def test_the_local_review_function_checks_its_callers_proof_with_sts_on_motos_server(local_pipeline):
    """The review function's process asks moto's server who signed the caller's proof: without
    one it refuses at once, with one it goes on to the pending review (here: none by that name)."""
    from local.lambdas import FunctionError
    from local.settling import proved

    pipeline = local_pipeline(UNUSED_ENDPOINT)
    event = {"execution_name": "ticket-T-0-none", "task_token": "t", "answers": {"queue": "sales"}}
    with pytest.raises(FunctionError) as refused:
        pipeline.reviews.invoke(event)
    assert refused.value.error_type == "IdentityNotProven"
    with pytest.raises(FunctionError) as proven:  # made for this answer to this function: its caller admitted
        pipeline.reviews.invoke(proved(event, pipeline.reviews.name))
    assert proven.value.error_type == "ReviewNotWaiting", proven.value
