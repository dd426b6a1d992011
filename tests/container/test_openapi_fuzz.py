"""Schemathesis against a real decision server (`python -m decision_server`) on the embedded model:
requests generated from its own `/openapi.json`, valid and invalid, checked with every default
check (no 5xx; every status, content type and response body as documented; schema-valid bodies
accepted, schema-invalid ones rejected).

A bounded run (examples and fuzzing phases, a few cases per operation) so the suite stays quick;
`make fuzz` runs the same server through every phase with at least 1000 generated requests.
"""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis

from decision_server.app import create_app
from decision_server.settings import Settings
from local.fuzz import FUZZ_SETTINGS
from local.services import DecisionContainer

pytestmark = [pytest.mark.model, pytest.mark.server]  # the fuzzed server runs in a process of its own

#: Generated cases per operation and generation mode (valid / invalid) in the fuzzing phase.
MAX_EXAMPLES = 15
REQUEST_TIMEOUT = 300  # seconds; a loaded CI machine is slow, and speed is not what this checks

CONFIG = schemathesis.Config.from_dict({
    "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
    "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
    "request-timeout": REQUEST_TIMEOUT,
})
SERVER_ENVIRONMENT = {**os.environ, **FUZZ_SETTINGS}
#: The document the fuzz server publishes, built here at collection time by the same code from the
#: same settings (test_the_fuzz_server_publishes_this_document checks that they are the same).
DOCUMENT = create_app(settings=Settings.from_env(SERVER_ENVIRONMENT)).openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=CONFIG)


@pytest.fixture(scope="module")
def fuzz_server_url(tmp_path_factory):
    log = tmp_path_factory.mktemp("fuzz") / "decision-server.log"
    with DecisionContainer(log, settings=FUZZ_SETTINGS) as container:
        container.wait_ready()
        yield container.url


def test_the_fuzz_server_publishes_this_document(fuzz_server_url):
    assert httpx.get(f"{fuzz_server_url}/openapi.json", timeout=60).json() == DOCUMENT


@schema.parametrize()
def test_the_server_answers_as_its_openapi_document_says(case, fuzz_server_url):
    case.call_and_validate(base_url=fuzz_server_url, timeout=REQUEST_TIMEOUT)
