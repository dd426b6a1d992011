"""A stand-in for the SageMaker endpoint on loopback that answers each decision with the option it
is told to, for runs that count what an item costs rather than what the model thinks of it
(`local.capacity`): no model is loaded, and an answer takes no time.

    with GivenEndpoint() as endpoint:          # boto3's sagemaker-runtime pointed at endpoint.url
        endpoint.answers = {"team": "platform"}   # question id -> the option answered surely
        ...                                        # a question not named is answered unsure

It speaks the decision contract as the container does at `POST /endpoints/{name}/invocations`
(`DecisionRequest` in, `SingleDecisionResponse` or `BatchDecisionResponse` out). Its model is
none a head was fitted on, so a head that reads the model's signals steps aside and the letters
decide (`Head.mismatch`); a head over the words alone decides as in service.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Self

from local.console import LoopbackServer
from local.services import LOOPBACK

#: What an answered option gets; the rest share what is left (a sure answer: past every threshold).
SURE = 0.97
#: Where the stand-in says it comes from (a model no head was fitted on).
STAND_IN_VERSION = "given-answers"


def answered(decision: Any, option_id: str | None) -> Any:
    """The `DecisionResult` of one decision: `option_id` surely, or (None) every option alike."""
    from decision_contract import DecisionResult, ModelInfo

    options = [o.id for o in decision.options]
    if option_id is not None and option_id not in options:
        raise ValueError(f"given answer {option_id!r} is not among the options of {decision.id!r} ({', '.join(options)})")
    rest = (1.0 - SURE) / (len(options) - 1)
    probabilities = [1.0 / len(options)] * len(options) if option_id is None else [
        SURE if o == option_id else rest for o in options]
    model = ModelInfo(file="given answers", bytes=0, sha256="0" * 64, context_size=0, threads=0, gpu_layers=0,
                      llama_cpp_python_version="none")
    return DecisionResult.from_signals(decision.id, options, [math.log(p) for p in probabilities], model=model,
                                       prompt_version=STAND_IN_VERSION)


def response_body(raw: bytes, answers: dict[str, str]) -> bytes:
    """The endpoint's answer to one request body (ValueError: a body the contract refuses)."""
    from decision_contract import BatchDecisionResponse, BatchTiming, DecisionRequest, SingleDecisionResponse

    request = DecisionRequest.model_validate_json(raw)
    if request.decision is not None:
        return SingleDecisionResponse(result=answered(request.decision, answers.get(request.decision.id))).model_dump_json().encode()
    results = [answered(d, answers.get(d.id)) for d in request.decisions or []]
    timing = BatchTiming(shared_prefix_tokens=0, shared_prefix_seconds=0.0, total_seconds=0.0, batch_size=len(results))
    return BatchDecisionResponse(results=results, timing=timing).model_dump_json().encode()


class GivenEndpoint:
    """The stand-in on a free loopback port; a context manager. `answers` may change between items;
    `requests` counts the invocations it answered."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self.requests = 0
        self._lock = threading.Lock()
        self._server = LoopbackServer((LOOPBACK, 0), self._handler_class(), name="given-endpoint")
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.endswith("/invocations"):
                    return self._send(404, {"error": {"code": "not_found", "message": self.path}})
                try:
                    with endpoint._lock:
                        endpoint.requests += 1
                        answers = dict(endpoint.answers)
                    body = response_body(raw, answers)
                except ValueError as error:  # pydantic's ValidationError is one
                    return self._send(422, {"error": {"code": "invalid_request", "message": str(error)}})
                self._reply(200, body)

            def _send(self, status: int, document: dict[str, Any]) -> None:
                self._reply(status, json.dumps(document).encode())

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name="given-endpoint", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
