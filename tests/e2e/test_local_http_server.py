"""The local API server (`make review`'s console, the webhook API): a browser that leaves while
the function is still answering (a closed tab, a reload) is one line in the terminal, not a
BrokenPipeError traceback, and the server goes on answering."""

from __future__ import annotations

import socket
import struct
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from local.console import LocalHttpApi, LoopbackServer

pytestmark = pytest.mark.server  # a loopback HTTP server, in a thread


class SlowApi:
    """Stands in for the function behind the server: answers once `go` is set, a large body."""

    function = SimpleNamespace(logical_id="ReviewConsoleFunction")

    def __init__(self) -> None:
        self.go = threading.Event()

    def handle(self, method, target, headers, body):
        self.go.wait(timeout=10)
        return 200, {"Content-Type": "application/json"}, b"[" + b"0," * (4 << 20) + b"0]"


def test_a_client_that_leaves_mid_request_is_one_line_and_the_server_goes_on(capsys):
    api = SlowApi()
    server = LoopbackServer(("127.0.0.1", 0), LocalHttpApi._handler_class(api), name="ReviewConsoleFunction")  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        client = socket.create_connection((host, port))
        client.sendall(b"GET /api/reviews/incident-1?x=1 HTTP/1.1\r\nHost: local\r\n\r\n")
        time.sleep(0.2)  # the request is being answered
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, as a closed tab
        client.close()
        api.go.set()
        deadline = time.monotonic() + 10
        err = ""
        while time.monotonic() < deadline and "client left" not in err:
            time.sleep(0.1)
            err += capsys.readouterr().err
        assert err.strip().splitlines() == [
            next(line for line in err.splitlines() if line.startswith("ReviewConsoleFunction: the client left before the "
                                                                      "answer to GET /api/reviews/incident-1 was sent ("))]
        assert "Traceback" not in err and "nothing else is affected" in err

        # the next request is answered as usual
        response = httpx.get(f"http://{host}:{port}/api/reviews", timeout=10)
        assert response.status_code == 200 and len(response.content) > 8 << 20
        assert "Traceback" not in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
