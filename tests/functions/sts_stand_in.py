"""A stand-in for STS's GetCallerIdentity that verifies a presigned query as STS does, so the
review function's identity proofs are held to a signature check in the tests (moto's STS checks
none and names one caller for every request).

It answers the requests of the STS client it is attached to (botocore's `before-send`): the
function builds and sends its request as in AWS, and this answers instead of the network. A
request is answered with its signer's ARN only when:

- the method is GET (the method the proof was signed for must be the one it is sent with);
- the host is STS's regional host for the credential scope's region (`sts.<region>.amazonaws.com`),
  or the global host for us-east-1, and the signature covers that very host;
- X-Amz-SignedHeaders names every header signed and each of them came with the request, with the
  value signed (botocore's own SigV4 signer recomputes the signature over them);
- the scope's service is sts, the Action GetCallerIdentity, the key one of its principals' (and its
  session token, for temporary credentials), and the query has not expired (X-Amz-Date +
  X-Amz-Expires, at most 7 days).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from botocore.auth import SIGV4_TIMESTAMP, UNSIGNED_PAYLOAD, SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.credentials import Credentials

from decision_router.adapters.caller_identity import sts_client
from decision_router.domain.callers import answer_binding, audience

ACCOUNT = "123456789012"
#: What review functions' tests are invoked as (tests.functions.test_intake_handlers.FakeLambdaContext).
FUNCTION_NAME = "decision-router-test"


@dataclass(frozen=True)
class Principal:
    """An identity STS knows: its ARN and the credentials that sign as it."""

    arn: str
    access_key: str
    secret_key: str
    token: str | None = None

    @property
    def account(self) -> str:
        return self.arn.split(":")[4]

    def sts(self, region: str = "us-east-1") -> Any:
        """An STS client holding this principal's credentials, as `review_cli complete` makes it."""
        return sts_client(region, aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                          aws_session_token=self.token)

    def proof(self, binding: str, region: str = "us-east-1", seconds: int = 60) -> str:
        """This principal's proof for the answer whose binding is `binding` (make_proof, as the CLI)."""
        from decision_router.adapters.caller_identity import make_proof

        return make_proof(self.sts(region), binding, seconds)

    def prove(self, event: dict[str, Any], function: str = FUNCTION_NAME, region: str = "us-east-1") -> dict[str, Any]:
        """`event` with this principal's proof made for it (`function`: the review function's name)."""
        binding = answer_binding(audience(function), event["execution_name"], event["task_token"], event["answers"],
                                 event.get("note", ""))
        return {**event, "identity_proof": self.proof(binding, region)}


def _role_session(role: str, session: str, n: int) -> Principal:
    return Principal(f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{session}", f"ASIA{role.upper()[:6]}{n:010d}",
                     f"{role}-{session}-secret", token=f"session-token-{role}-{session}")


#: The tests' reviewers: sessions of the Reviewer role (listed by the test stacks' ReviewerPrincipals
#: as `arn:aws:iam::123456789012:role/reviewers/Reviewer`), an IAM user listed by name, and principals
#: no test stack lists: a user of this account, the same role name in another account.
ALICE = _role_session("Reviewer", "alice@example.com", 1)
BOB = _role_session("Reviewer", "bob@example.com", 2)
CAROL = Principal(f"arn:aws:iam::{ACCOUNT}:user/reviewers/carol", "AKIACAROL00000000001", "carol-secret")
MALLORY = Principal(f"arn:aws:iam::{ACCOUNT}:user/mallory", "AKIAMALLORY000000001", "mallory-secret")
FOREIGN = Principal("arn:aws:sts::999999999999:assumed-role/Reviewer/alice@example.com", "ASIAFOREIGN000000001",
                    "foreign-secret", token="foreign-token")
#: The test stacks' ReviewerPrincipals (tests/fakes/worlds.py, tests/infra/conftest.py).
TEST_REVIEWER_PRINCIPALS = f"arn:aws:iam::{ACCOUNT}:role/reviewers/Reviewer,{CAROL.arn}"


class _Body:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_: Any):
        yield self.body


@dataclass
class StsStandIn:
    """GetCallerIdentity for `principals`, checked as STS checks a presigned query."""

    principals: tuple[Principal, ...] = (ALICE, BOB, CAROL, MALLORY, FOREIGN)
    now: datetime | None = None
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # (method, url, headers) sent

    def attach(self, client: Any) -> Any:
        """Answer `client`'s GetCallerIdentity requests here (the client the function sends proofs with)."""
        client.meta.events.register_first("before-send.sts.GetCallerIdentity", self._answer)
        return client

    def verify(self, method: str, url: str, headers: dict[str, str]) -> Principal:
        """The principal whose key signed this request, or PermissionError with STS's error code."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        params = dict(query)
        if len(params) != len(query):
            raise PermissionError("InvalidParameterValue: a parameter is repeated")
        by_key = {p.access_key: p for p in self.principals}
        scope = params.get("X-Amz-Credential", "").split("/")
        principal = by_key.get(scope[0])
        if principal is None or len(scope) != 5:
            raise PermissionError("InvalidClientTokenId: The security token included in the request is invalid")
        _, day, region, service, terminal = scope
        if service != "sts" or terminal != "aws4_request" or params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise PermissionError("SignatureDoesNotMatch: Credential should be scoped to the sts service")
        if parts.netloc not in {f"sts.{region}.amazonaws.com", *(["sts.amazonaws.com"] if region == "us-east-1" else [])}:
            raise PermissionError(f"SignatureDoesNotMatch: Credential should be scoped to a valid region, not {region!r} "
                                  f"at {parts.netloc}")
        if principal.token is not None and params.get("X-Amz-Security-Token") != principal.token:
            raise PermissionError("InvalidClientTokenId: The security token included in the request is invalid")
        signed = params.get("X-Amz-SignedHeaders", "").split(";")
        if "host" not in signed:
            raise PermissionError("SignatureDoesNotMatch: the host header must be signed")
        received = {name.lower(): value for name, value in headers.items()}
        missing = [h for h in signed if h != "host" and h not in received]
        if missing:
            raise PermissionError(f"SignatureDoesNotMatch: signed headers not sent: {missing}")
        timestamp = params.get("X-Amz-Date", "")
        if not timestamp.startswith(day):
            raise PermissionError("SignatureDoesNotMatch: the scope's date is not X-Amz-Date's")
        # botocore's signer over the request as received: the signed headers only, the query less its signature.
        request = AWSRequest(method=method, url=urlunsplit((parts.scheme, parts.netloc, parts.path or "/", "", "")),
                             headers={h: received[h] for h in signed if h != "host"},
                             params=[(k, v) for k, v in query if k != "X-Amz-Signature"])
        request.context["timestamp"] = timestamp
        signer = SigV4Auth(Credentials(principal.access_key, principal.secret_key, principal.token), "sts", region)
        if signer.signed_headers(signer.headers_to_sign(request)) != params["X-Amz-SignedHeaders"]:
            raise PermissionError("SignatureDoesNotMatch: X-Amz-SignedHeaders does not name the headers signed")
        for payload in (None, UNSIGNED_PAYLOAD):
            request.context["payload_signing_enabled"] = payload is None
            expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
            if hmac.compare_digest(expected, params.get("X-Amz-Signature", "")):
                break
        else:
            raise PermissionError("SignatureDoesNotMatch: The request signature we calculated does not match "
                                  "the signature you provided")
        at = datetime.strptime(timestamp, SIGV4_TIMESTAMP).replace(tzinfo=timezone.utc)
        seconds = int(params.get("X-Amz-Expires", "0"))
        if not 0 < seconds <= 604800 or (self.now or datetime.now(timezone.utc)) > at + timedelta(seconds=seconds):
            raise PermissionError("ExpiredToken: Request has expired")
        if params.get("Action") != "GetCallerIdentity" or params.get("Version") != "2011-06-15":
            raise PermissionError("InvalidAction: this stand-in answers GetCallerIdentity only")
        return principal

    def _answer(self, request: Any, **_: Any) -> AWSResponse:
        headers = {name: value.decode() if isinstance(value, bytes) else value for name, value in request.headers.items()}
        self.requests.append((request.method, request.url, headers))
        try:
            principal = self.verify(request.method, request.url, headers)
        except PermissionError as error:
            code, _, message = str(error).partition(": ")
            body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
                    "</Error><RequestId>stand-in</RequestId></ErrorResponse>").encode()
            return AWSResponse(request.url, 403, {}, _Body(body))
        body = ("<GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><GetCallerIdentityResult>"
                f"<Arn>{principal.arn}</Arn><UserId>{principal.access_key}</UserId><Account>{principal.account}</Account>"
                "</GetCallerIdentityResult><ResponseMetadata><RequestId>stand-in</RequestId></ResponseMetadata>"
                "</GetCallerIdentityResponse>").encode()
        return AWSResponse(request.url, 200, {}, _Body(body))
