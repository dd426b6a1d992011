"""Fixtures of the end-to-end tests: what `make demo` runs, built from the demo's own modules.

`local_pipeline(decision_url)`: a fresh moto server (Step Functions executing), boto3 pointed at
it and `sagemaker-runtime` at `decision_url`, template.yaml's resources created, the three
functions cold-started from their handlers, each in its own process. Everything is stopped and
the environment restored at the end of the test."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Callable, Iterator, TextIO

import pytest

from local.pipeline import LocalPipeline
from local.services import MotoServer, local_aws_environ, patched_environ

# Nothing listens here: for tests whose items never reach the endpoint.
UNUSED_ENDPOINT = "http://127.0.0.1:9"


@pytest.fixture(scope="session")
def lambda_log(tmp_path_factory) -> Iterator[TextIO]:
    """The functions' stdout/stderr (Powertools logs, EMF metrics), one file for the session."""
    with open(tmp_path_factory.mktemp("e2e") / "lambda.log", "w", encoding="utf-8") as log:
        yield log


@pytest.fixture
def local_pipeline(lambda_log) -> Iterator[Callable[[str], LocalPipeline]]:
    with ExitStack() as stack:

        def start(decision_url: str) -> LocalPipeline:
            moto = stack.enter_context(MotoServer())
            stack.enter_context(patched_environ(local_aws_environ(moto, decision_url)))
            return stack.enter_context(LocalPipeline(log=lambda_log))

        yield start
