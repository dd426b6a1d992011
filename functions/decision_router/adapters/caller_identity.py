"""Who called the review function, proven by STS rather than said by the caller.

Lambda's direct invoke does not tell a function its caller. So the caller (ops/review_cli.py)
presigns an STS GetCallerIdentity request with its own credentials (`identity_proof`: the query
string, valid a minute) and sends it with the answer; the function sends that request to STS
itself, at the STS endpoint of its own region (the host is never the caller's), and STS answers
with the ARN of the principal whose credentials signed it. A name the caller types proves
nothing; a proof cannot be made without that principal's credentials.

The proof is bound to one answer, as Vault's AWS auth binds its proof to a server ID: it signs
the `X-Decision-Router-Answer` header (domain/callers.py `answer_binding`: this review function,
the execution, the task token, the answers, the note). The function recomputes that digest from
the answer it got and sends it as the header: STS verifies the caller's signature over it, so a
proof made for one answer is refused for any other. The function also refuses a proof that signs
any other header set, and remembers each proof it accepted until it expires (adapters/used_proofs.py):
a captured proof answers nothing else, and nothing twice.

Both sides talk to STS's regional endpoint (`https://sts.<region>.amazonaws.com`) whatever
AWS_STS_REGIONAL_ENDPOINTS says: the host is signed, and the caller and the function must name
the same one. The proof is signed for GET, the method the function sends it with (STS verifies
the method too).
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs

import boto3
import botocore.session
from botocore import UNSIGNED
from botocore.config import Config

from ..domain.callers import ANSWER_HEADER, SIGNED_HEADERS, ProvenCaller
from ..domain.signatures import IdentityNotProven

#: The longest validity a proof may ask for (the CLI asks PROOF_SECONDS).
MAX_PROOF_SECONDS = 300
PROOF_SECONDS = 60
#: How far ahead of the function's clock a proof may be dated (a caller's clock may run fast).
MAX_FUTURE_SECONDS = 300
#: Headers added to the proof's request: none in AWS. A local run on moto's server (which routes
#: an unsigned request by its Authorization header's scope, and checks no signature) names STS
#: there (local/deployment.py); real STS would refuse a request signed twice.
LOCAL_ROUTING_HEADERS: dict[str, str] = {}
#: Query parameters a presigned GetCallerIdentity carries, and nothing else.
ALLOWED = {"Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
           "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}


def sts_client(region: str | None = None, *, session: boto3.Session | None = None, **kwargs: Any) -> Any:
    """An STS client on the regional endpoint of `region` (the default region if None), whatever
    AWS_STS_REGIONAL_ENDPOINTS or the config file says ("legacy" would send us-east-1 to the
    global host). An endpoint configured for all services or for STS (AWS_ENDPOINT_URL: a local
    run's moto server) is still honoured. `session`: the boto3 session whose credentials and
    event handlers the client takes (a profile's); the endpoint is still the regional one."""
    regional = botocore.session.get_session()
    regional.set_config_variable("sts_regional_endpoints", "regional")
    client = boto3.Session(botocore_session=regional).client(
        "sts", region_name=region or (session.region_name if session else None), **({} if session else kwargs))
    if session is None:
        return client
    return session.client("sts", region_name=client.meta.region_name, endpoint_url=client.meta.endpoint_url, **kwargs)


def make_proof(sts: Any, binding: str, seconds: int = PROOF_SECONDS) -> str:
    """The caller's side: a GetCallerIdentity presigned for GET (its query string) by `sts`, a
    client with the caller's credentials for the review function's region (`sts_client`), signing
    `binding` (domain/callers.py answer_binding) in the X-Decision-Router-Answer header."""
    if not binding:
        raise ValueError("a proof is made for one answer: its binding is missing")

    def bind(request: Any, **_: Any) -> None:
        request.headers[ANSWER_HEADER] = binding

    events = sts.meta.events
    events.register("before-sign.sts.GetCallerIdentity", bind, unique_id="decision-router-answer")
    try:
        url = sts.generate_presigned_url("get_caller_identity", ExpiresIn=seconds, HttpMethod="GET")
    finally:
        events.unregister("before-sign.sts.GetCallerIdentity", unique_id="decision-router-answer")
    return url.partition("?")[2]


def _checked(proof: str, region: str, now: float) -> dict[str, str]:
    """The proof's parameters, or IdentityNotProven naming what is wrong with it."""
    if not proof:
        raise IdentityNotProven("identity_proof: missing; answer with `python -m ops.review_cli complete`, which "
                                "proves who you are with your AWS credentials")
    if len(proof) > 8192 or "#" in proof:
        raise IdentityNotProven("identity_proof: not a presigned STS query")
    query = parse_qs(proof, keep_blank_values=True, strict_parsing=False)
    if any(len(values) != 1 for values in query.values()) or set(query) - ALLOWED:
        raise IdentityNotProven(f"identity_proof: unexpected parameters {sorted(set(query) - ALLOWED)}")
    single = {name: values[0] for name, values in query.items()}
    if single.get("Action") != "GetCallerIdentity" or single.get("Version") != "2011-06-15":
        raise IdentityNotProven("identity_proof: must presign STS GetCallerIdentity (Version 2011-06-15)")
    if single.get("X-Amz-SignedHeaders") != SIGNED_HEADERS or not single.get("X-Amz-Signature"):
        raise IdentityNotProven(f"identity_proof: must be a SigV4 presigned query signing exactly {SIGNED_HEADERS!r} "
                                "(the host and this answer's binding); make a new one with review_cli complete")
    scope = single.get("X-Amz-Credential", "").split("/")
    if len(scope) != 5 or scope[2] != region or scope[3] != "sts":
        raise IdentityNotProven(f"identity_proof: signed for {'/'.join(scope[2:4]) or 'nothing'}, "
                                f"not sts in {region}")
    try:
        seconds = int(single.get("X-Amz-Expires", ""))
    except ValueError:
        raise IdentityNotProven("identity_proof: X-Amz-Expires is not a number of seconds") from None
    if not 0 < seconds <= MAX_PROOF_SECONDS:
        raise IdentityNotProven(f"identity_proof: valid {seconds} s, at most {MAX_PROOF_SECONDS}")
    try:
        dated = datetime.strptime(single.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise IdentityNotProven("identity_proof: X-Amz-Date is not a SigV4 time") from None
    if dated > now + MAX_FUTURE_SECONDS:
        raise IdentityNotProven(f"identity_proof: dated {int(dated - now)} s ahead of this function's clock")
    single["expires_at"] = str(int(dated) + seconds)
    return single


class StsCallerIdentity:
    """Sends a caller's presigned GetCallerIdentity to STS (unsigned by this function: the
    caller's signature is the whole proof), with the answer's binding header, and returns the
    principal STS names."""

    def __init__(self, region: str | None = None, client: Any | None = None):
        self.client = client or sts_client(region, config=Config(signature_version=UNSIGNED))
        self.region = self.client.meta.region_name

    def identity(self, proof: str | None, *, binding: str) -> ProvenCaller:
        """Who signed `proof` for the answer whose binding is `binding`, or IdentityNotProven."""
        if not binding:
            raise IdentityNotProven("identity_proof: no answer to bind it to")
        params = _checked(proof or "", self.region, time.time())
        query = proof

        def presigned(request: Any, **_: Any) -> None:
            # The request botocore built is replaced by the caller's presigned one, at our own endpoint,
            # with the binding recomputed here: STS checks the caller signed this very header.
            request.url = f"{self.client.meta.endpoint_url.rstrip('/')}/?{query}"
            request.method, request.data = "GET", b""
            request.headers[ANSWER_HEADER] = binding
            for name, value in LOCAL_ROUTING_HEADERS.items():
                request.headers[name] = value
            if "Content-Type" in request.headers:
                del request.headers["Content-Type"]

        events = self.client.meta.events
        events.register("request-created.sts.GetCallerIdentity", presigned, unique_id="caller-identity-proof")
        try:
            answer = self.client.get_caller_identity()
        except Exception as error:  # noqa: BLE001 - STS refused the signature (expired, altered, unknown key)
            raise IdentityNotProven(f"identity_proof: STS refused it ({type(error).__name__}: {error}); a proof "
                                    "answers only the answer it was made for") from None
        finally:
            events.unregister("request-created.sts.GetCallerIdentity", unique_id="caller-identity-proof")
        arn = str(answer.get("Arn", ""))
        if not arn.startswith("arn:"):
            raise IdentityNotProven(f"caller: STS answered {arn!r}, not an ARN")
        key = hashlib.sha256(params["X-Amz-Signature"].encode("utf-8")).hexdigest()
        return ProvenCaller(arn=arn, proof_key=key, expires_at=int(params["expires_at"]))
