"""What the stack's signing keys vouch for: who answered a review, and which heads the
relearning gate passed.

An HMAC-SHA256 key signs each purpose apart (the purpose is part of the signed message, so a
signature made for one can never stand for the other), and each purpose has its own key in a
stack: SigningKeySecret for reviewer identities (read by the review function, the review console
and the relearning function), HeadSigningKeySecret for heads (read by the relearning function,
which signs, and the routing functions, which verify and must not be able to sign who answered).
Whoever else writes a labelled example or a head (SendTaskSuccess with a token from the review
queue, s3:PutObject on the head store, ssm:PutParameter on a pointer) cannot make a signature
that verifies.

Reviewer identities are authenticated principals, never names typed by the reviewer:
`cognito:<sub>` for the console's signed-in reviewer (the JWT API Gateway verified), `iam:<ARN>`
for the review function's caller (the ARN STS returned for the caller's own signed
GetCallerIdentity request, `adapters.caller_identity`).
"""

from __future__ import annotations

import hashlib
import hmac
import json

#: Purposes: each signature names what it vouches for.
REVIEW_IDENTITY = "review-identity"
HEAD = "head"


class IdentityNotProven(ValueError):
    """A review answer whose caller could not be authenticated; the message says why."""


class SignatureRefused(ValueError):
    """A signed object (a head) whose signature is missing or does not verify; the message says why."""


def sign(key: bytes, purpose: str, *parts: str) -> str:
    """Hex HMAC-SHA256 of the purpose and the parts (JSON, so no two part lists collide)."""
    if not key:
        raise ValueError("signing key: empty")
    message = json.dumps([purpose, *parts], ensure_ascii=False, separators=(",", ":")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def verify(key: bytes, signature: str | None, purpose: str, *parts: str) -> bool:
    """Whether `signature` is `sign(key, purpose, *parts)` (constant-time)."""
    return bool(signature) and hmac.compare_digest(str(signature), sign(key, purpose, *parts))


def cognito_identity(sub: str) -> str:
    """The console reviewer's identity: the user pool's immutable `sub`."""
    if not sub:
        raise IdentityNotProven("reviewer: the token names no `sub`")
    return f"cognito:{sub}"


def iam_identity(arn: str) -> str:
    """The review function caller's identity: the principal ARN STS authenticated."""
    if not arn.startswith("arn:"):
        raise IdentityNotProven(f"caller: STS answered {arn!r}, not an ARN")
    return f"iam:{arn}"


def review_identity_signature(key: bytes, execution_name: str, reviewer_id: str) -> str:
    """What the workflow stores beside a label: the key's word that `reviewer_id` answered this execution."""
    return sign(key, REVIEW_IDENTITY, execution_name, reviewer_id)


def head_signature(key: bytes, policy: str, question: str, sha256: str, head_version: str) -> str:
    """What a head pointer carries: the key's word that the relearning gate passed these bytes
    (by their sha256) as this version of this policy question's head."""
    return sign(key, HEAD, policy, question, sha256, head_version)


def review_identity_verified(key: bytes, execution_name: str, reviewer_id: str, signature: str | None) -> bool:
    return bool(reviewer_id) and verify(key, signature, REVIEW_IDENTITY, execution_name, reviewer_id)
