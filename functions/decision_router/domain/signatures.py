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

A head's signature names what it was made for (`HEAD_SHADOW` or `HEAD_SERVICE`): the relearning
function signs a candidate for shadow when its shadow starts, and signs it anew for service only
when it promotes it (after the gate, the shadow's verdict and, with RelearningApproval manual, a
person's approval). A shadow's signature never verifies for the head in service, so whoever may
write the head bucket and the pointers cannot put a candidate the shadow refused (or a person
rejected) in service by copying its bytes and its signature. A signature made before signatures
named their purpose (`LEGACY_HEAD`, one for both) verifies for neither: the routing functions
refuse it (`legacy_head_signature` only tells it apart in the reason).

The same head key also keys the sampled precision checks' draw (`CHECK_DRAW`, a purpose of its
own, domain/precision.py): the routing functions hold it already, and no sender can compute the
draw of the items it sends.

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
#: A head the relearning gate passed, to answer beside the head in service (decides nothing).
HEAD_SHADOW = "head-shadow"
#: A head promoted to decide in service (after the gate, the shadow and any approval).
HEAD_SERVICE = "head-service"
HEAD_PURPOSES = (HEAD_SHADOW, HEAD_SERVICE)
#: What heads were signed for before signatures named shadow or service: no longer verifies.
LEGACY_HEAD = "head"
#: The sampled precision checks' draw (domain/precision.py): keyed, so no sender can compute it.
CHECK_DRAW = "precision-check-draw"


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


def head_signature(key: bytes, policy: str, question: str, sha256: str, head_version: str,
                   purpose: str = HEAD_SHADOW) -> str:
    """What a head pointer carries: the key's word that these bytes (by their sha256) are this
    version of this policy question's head, for `purpose`: HEAD_SHADOW (the gate passed them; the
    default, the least a signature can vouch for) or HEAD_SERVICE (promoted: only `promote` signs so)."""
    if purpose not in HEAD_PURPOSES:
        raise ValueError(f"head signature purpose {purpose!r}: one of {', '.join(HEAD_PURPOSES)}")
    return sign(key, purpose, policy, question, sha256, head_version)


def legacy_head_signature(key: bytes, policy: str, question: str, sha256: str, head_version: str) -> str:
    """The signature heads carried before it named shadow or service (the same for both): never
    accepted, only recognised to say why a head is refused."""
    return sign(key, LEGACY_HEAD, policy, question, sha256, head_version)


def review_identity_verified(key: bytes, execution_name: str, reviewer_id: str, signature: str | None) -> bool:
    return bool(reviewer_id) and verify(key, signature, REVIEW_IDENTITY, execution_name, reviewer_id)
