"""The review console and the webhook API on this machine: what API Gateway's HTTP API does in
front of a function, done by a loopback HTTP server (`LocalHttpApi`), plus, for the console, a
local sign-in that needs no AWS (`LocalConsole`).

- Routes, and which of them need a token, are read from template.yaml (the function's HttpApi
  events and the API's DefaultAuthorizer, if it has one). A request becomes the HTTP API's payload
  2.0 event (a body that is not UTF-8 base64-encoded, as API Gateway does with binary bodies) and
  the real handler (`review_console.app`, `ticket_webhook.app`, cold-started in its own process by
  `local.lambdas.LocalFunction`) answers it.
- The JWT authorizer: a route that needs a token gets 401 without a valid one, as from API
  Gateway; a valid token's claims go into `requestContext.authorizer.jwt.claims`, as API Gateway
  puts them there, so the handler reads the reviewer exactly as it does in AWS.
- Local sign-in (POST /local/sign-in {"username"}): signs an ID token like Cognito's for any name,
  in the reviewers' group, with a key made for this run only. This stands in for Cognito, which
  does not run here; it exists only in this server, which binds to 127.0.0.1 and is never
  deployed (the deployed page signs in against the stack's user pool instead).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self, TextIO
from urllib.parse import urlsplit

from local.cloudformation import Stack
from local.event_sources import http_event
from local.lambdas import LocalFunction
from local.services import LOOPBACK

CONSOLE_FUNCTION = "ReviewConsoleFunction"
TOKEN_SECONDS = 3600
MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Route:
    method: str  # GET, POST, ... or ANY
    path: str  # as the template writes it: /, /static/{name}, /api/{proxy+}
    needs_token: bool

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method not in ("ANY", method):
            return None
        pattern, names = "", []
        for part in re.split(r"(\{[^}]+\})", self.path):
            if part.startswith("{"):
                name = part[1:-1]
                greedy = name.endswith("+")
                names.append(name.rstrip("+"))
                pattern += "(.+)" if greedy else "([^/]+)"
            else:
                pattern += re.escape(part)
        found = re.fullmatch(pattern, path)
        return dict(zip(names, found.groups())) if found else None


def template_routes(stack: Stack, function: str = CONSOLE_FUNCTION) -> tuple[list[Route], dict[str, Any] | None]:
    """The function's HttpApi routes and the JWT configuration of the API's default authorizer
    (None for an API without one: every route open, as the webhook API's)."""
    routes, api_id = [], None
    for event in stack.properties(function).get("Events", {}).values():
        if event["Type"] != "HttpApi":
            continue
        props = event["Properties"]
        api_id = props["ApiId"]["Ref"]
        authorizer = props.get("Auth", {}).get("Authorizer")
        routes.append(Route(props["Method"].upper(), props["Path"], needs_token=authorizer != "NONE"))
    if api_id is None:
        raise ValueError(f"{function} has no HttpApi events")
    auth = stack.properties(api_id).get("Auth")
    if not auth:
        return sorted([Route(r.method, r.path, needs_token=False) for r in routes], key=lambda r: -len(r.path)), None
    jwt_config = stack.resolve(auth["Authorizers"][auth["DefaultAuthorizer"]]["JwtConfiguration"])
    # Longest paths first: /static/{name} before a catch-all.
    return sorted(routes, key=lambda r: -len(r.path)), jwt_config


class LocalTokens:
    """Signs and checks ID tokens as Cognito and the JWT authorizer would (issuer, audience,
    expiry, signature), with a key that lives only as long as this process. Local only: see the
    module's docstring."""

    def __init__(self, issuer: str, audience: list[str], group: str):
        from joserfc.jwk import OctKey

        self.issuer, self.audience, self.group = issuer, audience, group
        self._key = OctKey.generate_key(256)

    @staticmethod
    def sub_of(username: str) -> str:
        """The `sub` a local sign-in gives `username` (the same on every sign-in, as Cognito's)."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"local-reviewer:{username}"))

    def sign(self, username: str, *, groups: list[str] | None = None, seconds: int = TOKEN_SECONDS) -> str:
        from joserfc import jwt

        now = int(time.time())
        claims: dict[str, Any] = {
            "sub": self.sub_of(username), "iss": self.issuer,
            "aud": self.audience[0], "token_use": "id", "auth_time": now, "iat": now, "exp": now + seconds,
            "cognito:username": username, "cognito:groups": [self.group] if groups is None else groups,
        }
        if "@" in username:
            # As for a reviewer an administrator invited: the email is verified (the console shows
            # and audits an email only then; everything is audited by `sub`).
            claims["email"], claims["email_verified"] = username, True
        return jwt.encode({"alg": "HS256", "typ": "JWT"}, claims, self._key)

    def verify(self, authorization: str | None) -> dict[str, Any] | None:
        """The claims of a valid `Bearer <token>`, else None (API Gateway answers 401 then)."""
        from joserfc import jwt
        from joserfc.errors import JoseError

        if not authorization or not authorization.startswith("Bearer "):
            return None
        try:
            token = jwt.decode(authorization.removeprefix("Bearer ").strip(), self._key, algorithms=["HS256"])
            jwt.JWTClaimsRegistry(iss={"essential": True, "value": self.issuer},
                                  aud={"essential": True, "values": self.audience},
                                  exp={"essential": True}).validate(token.claims)
        except (JoseError, ValueError):
            return None
        return dict(token.claims)


#: What a client that leaves mid-request (a browser closing its tab, a reload) raises on its socket.
DROPPED = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def dropped(name: str, what: str, error: BaseException, out: TextIO | None = None) -> None:
    """One line for a client that left before its answer was sent: nothing failed on our side."""
    print(f"{name}: the client left before the answer to {what} was sent ({type(error).__name__}); "
          "nothing else is affected", file=out or sys.stderr, flush=True)


class LoopbackServer(ThreadingHTTPServer):
    """The loopback HTTP server of a local API: a client that leaves mid-request is one line on
    stderr, not socketserver's traceback (any other error still prints its traceback)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], name: str) -> None:
        super().__init__(address, handler)
        self.name = name

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, DROPPED):
            dropped(self.name, f"a request from {client_address[0]}:{client_address[1]}", error)
            return
        super().handle_error(request, client_address)


class LocalHttpApi:
    """One function behind a loopback HTTP server, routed as its HTTP API in template.yaml routes
    it; a context manager."""

    def __init__(self, stack: Stack, function: str, *, log: TextIO | None = None, port: int = 0,
                 env: dict[str, str] | None = None, overrides: dict[str, Any] | None = None):
        """`overrides`: module attributes set in the function's process (`LocalFunction`; tests)."""
        self.function = LocalFunction(stack, function, log=log, env=env, overrides=overrides)
        self.routes, self.jwt_config = template_routes(stack, function)
        self.tokens: LocalTokens | None = None
        self._server = LoopbackServer((LOOPBACK, port), self._handler_class(), name=self.function.logical_id)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def local_route(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, str], bytes] | None:
        """A route of this server alone (none here), answered before the template's."""
        return None

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes | str | None) -> tuple[int, dict[str, str], bytes]:
        """One request, as API Gateway and Lambda would answer it."""
        split = urlsplit(target)
        path = split.path or "/"
        raw = body.encode("utf-8") if isinstance(body, str) else body
        local = self.local_route(method, path, raw)
        if local is not None:
            return local
        for route in self.routes:
            parameters = route.match(method, path)
            if parameters is None:
                continue
            claims = None
            if route.needs_token:
                claims = self.tokens.verify(headers.get("authorization")) if self.tokens else None
                if claims is None:
                    return 401, {"Content-Type": "application/json", "WWW-Authenticate": "Bearer"}, b'{"message":"Unauthorized"}'
            event = http_event(method, path, route_key=route.key, query=split.query, headers=headers, body=raw,
                               path_parameters=parameters or None, claims=claims)
            # One execution environment: requests wait for it in turn (Lambda would start more).
            response = self.function.invoke(event)
            return _http_response(response)
        return 404, {"Content-Type": "application/json"}, b'{"message":"Not Found"}'

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        console = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self._send(413, {"Content-Type": "application/json"}, b'{"message":"Request Entity Too Large"}')
                    return
                body = self.rfile.read(length) if length else None
                try:
                    headers = {name.lower(): value for name, value in self.headers.items()}
                    status, headers, payload = console.handle(self.command, self.path, headers, body)
                except Exception:  # noqa: BLE001 - what API Gateway answers when the function fails
                    status, headers, payload = 500, {"Content-Type": "application/json"}, b'{"message":"Internal Server Error"}'
                self._send(status, headers, payload)

            def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except DROPPED as error:  # the browser went away while the function answered
                    self.close_connection = True
                    dropped(console.function.logical_id, f"{self.command} {urlsplit(self.path).path}", error)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the function logs for itself
                pass

        return Handler

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"http-api-{self.function.logical_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.function.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


class LocalConsole(LocalHttpApi):
    """The console function behind a loopback HTTP server, with the local sign-in."""

    def __init__(self, stack: Stack, *, log: TextIO | None = None, port: int = 0,
                 overrides: dict[str, Any] | None = None):
        # The handler is told the page signs in locally; everything else is the template's environment.
        super().__init__(stack, CONSOLE_FUNCTION, log=log, port=port, env={"CONSOLE_SIGN_IN": "local"},
                         overrides=overrides)
        assert self.jwt_config is not None, "the console's API has a JWT authorizer in template.yaml"
        self.tokens = LocalTokens(self.jwt_config["issuer"], list(self.jwt_config["audience"]),
                                  self.function.env["REVIEWER_GROUP"])

    def local_route(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, str], bytes] | None:
        return self._sign_in(body) if (method, path) == ("POST", "/local/sign-in") else None

    def _sign_in(self, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        try:
            username = str(json.loads(body or b"{}").get("username", "")).strip()
        except (ValueError, AttributeError):
            username = ""
        if not username:
            return 400, {"Content-Type": "application/json"}, b'{"error":"username: give a name (e.g. an email address)"}'
        token = self.tokens.sign(username)
        return 200, {"Content-Type": "application/json", "Cache-Control": "no-store"}, json.dumps({"id_token": token}).encode()


def _http_response(response: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    import base64

    headers = {k: ", ".join(v) if isinstance(v, list) else str(v) for k, v in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers[name] = ", ".join(values)
    body = response.get("body") or ""
    payload = base64.b64decode(body) if response.get("isBase64Encoded") else body.encode("utf-8")
    return int(response.get("statusCode", 200)), headers, payload
