"""Who called the review function, proven by STS rather than said by the caller.

Lambda's direct invoke does not tell a function its caller. So the caller (ops/review_cli.py)
presigns an STS GetCallerIdentity request with its own credentials (`identity_proof`: the query
string, valid a minute) and sends it with the answer; the function sends that request to STS
itself, at the STS endpoint of its own region (the host is never the caller's), and STS answers
with the ARN of the principal whose credentials signed it. A name the caller types proves
nothing; a proof cannot be made without that principal's credentials.

A proof replayed within its minute names the same principal it was made by: it can only give
another label to that principal, never to someone else.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import boto3
from botocore import UNSIGNED
from botocore.config import Config

from ..domain.signatures import IdentityNotProven, iam_identity

#: The longest validity a proof may ask for (the CLI asks PROOF_SECONDS).
MAX_PROOF_SECONDS = 300
PROOF_SECONDS = 60
#: Headers added to the proof's request: none in AWS. A local run on moto's server (which routes
#: an unsigned request by its Authorization header's scope, and checks no signature) names STS
#: there (local/deployment.py); real STS would refuse a request signed twice.
LOCAL_ROUTING_HEADERS: dict[str, str] = {}
#: Query parameters a presigned GetCallerIdentity carries, and nothing else.
ALLOWED = {"Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
           "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}


def make_proof(sts: Any, seconds: int = PROOF_SECONDS) -> str:
    """The caller's side: a presigned GetCallerIdentity (its query string) from `sts`, a client
    with the caller's credentials, for the review function's region."""
    url = sts.generate_presigned_url("get_caller_identity", ExpiresIn=seconds)
    return url.partition("?")[2]


def _checked(proof: str, region: str) -> str:
    """The proof's query, or IdentityNotProven naming what is wrong with it."""
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
    if single.get("X-Amz-SignedHeaders") != "host" or not single.get("X-Amz-Signature"):
        raise IdentityNotProven("identity_proof: must be a SigV4 presigned query signing the host only")
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
    return proof


class StsCallerIdentity:
    """Sends a caller's presigned GetCallerIdentity to STS (unsigned by this function: the
    caller's signature is the whole proof) and returns the identity STS names."""

    def __init__(self, region: str | None = None, client: Any | None = None):
        self.client = client or boto3.client("sts", region_name=region, config=Config(signature_version=UNSIGNED))
        self.region = self.client.meta.region_name

    def identity(self, proof: str | None) -> str:
        """`iam:<ARN>` of whoever signed `proof`, or IdentityNotProven."""
        query = _checked(proof or "", self.region)

        def presigned(request: Any, **_: Any) -> None:
            # The request botocore built is replaced by the caller's presigned one, at our own endpoint.
            request.url = f"{self.client.meta.endpoint_url.rstrip('/')}/?{query}"
            request.method, request.data = "GET", b""
            for name, value in LOCAL_ROUTING_HEADERS.items():
                request.headers[name] = value
            if "Content-Type" in request.headers:
                del request.headers["Content-Type"]

        events = self.client.meta.events
        events.register("request-created.sts.GetCallerIdentity", presigned, unique_id="caller-identity-proof")
        try:
            answer = self.client.get_caller_identity()
        except Exception as error:  # noqa: BLE001 - STS refused the signature (expired, altered, unknown key)
            raise IdentityNotProven(f"identity_proof: STS refused it ({type(error).__name__}: {error})") from None
        finally:
            events.unregister("request-created.sts.GetCallerIdentity", unique_id="caller-identity-proof")
        return iam_identity(answer.get("Arn", ""))
