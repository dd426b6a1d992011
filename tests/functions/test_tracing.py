"""The handlers are traced the Powertools way (a Tracer in each, capture_lambda_handler), without
X-Ray: the `traces` fixture records the subsegments. The whole path of a ticket (judging, the
endpoint call, the workflow start) is traced in test_intake_handlers.py."""

import importlib

import pytest

from tests.functions.test_intake_handlers import FakeLambdaContext


@pytest.mark.parametrize("handler", ["incident_intake", "review"])
def test_the_other_handlers_are_traced(traces, handler):
    app = importlib.import_module(f"{handler}.app")
    # Not an event of theirs: the review function refuses it, the incident intake cannot park it
    # without its DLQ configured; either raises inside the traced handler.
    with pytest.raises((ValueError, RuntimeError)):
        app.lambda_handler({"detail-type": "not an event this function takes"}, FakeLambdaContext())
    assert traces.subsegments == ["## lambda_handler"]
