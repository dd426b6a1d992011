"""Heads as versioned artifacts outside the code: which head decides a policy question in service.

A head promoted by the relearning workflow is an object of the head store (a versioned S3
bucket: `heads/<policy>/<question>.json`, its fit report beside it). Which version is in service
is named in one place, a `HeadPointer` held in one SSM parameter per policy question
(`<prefix>/<policy>/<question>`). No parameter means the head shipped beside the policy decides.
The routing functions read the pointer every few minutes (`intake/live_heads.py`) and verify the
object exactly as a shipped head is verified (sha256, then options and question digest).

Each pointer names the one it replaced (`previous`), so a rollback puts that one back (or, when
there is none, deletes the parameter: the shipped head decides again).

A candidate serving in shadow (domain/shadow.py) has a pointer of its own beside the one in
service (`shadow_parameter_name`, its object at `shadow_key`): the routing functions apply it
beside the head in service and record its answers; it decides nothing.

A pointer is trusted only for the object it may name: the head store's own bucket and the
question's own key (`pointer_problems`); anything else is refused as a bad head is.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from .heads import Sha256

Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
#: The artifacts' keys in the head store.
HEADS_FOLDER = "heads"


class HeadPointer(BaseModel):
    """The head in service for one policy question: the object (bucket, key, S3 version), its
    sha256 and the head's own version (what decision records name), and how it got there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Name
    question: Name
    bucket: Annotated[str, StringConstraints(min_length=3, max_length=63)]
    key: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    s3_version: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    sha256: Sha256
    head_version: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    action: Literal["promoted", "rolled_back", "shadow"] = "promoted"
    at: str = Field(description="When the pointer was set (ISO 8601, UTC).")
    by: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    reason: Annotated[str, StringConstraints(max_length=2000)] = ""
    previous: "HeadPointer | None" = Field(None, description="The pointer this one replaced; None: the shipped head.")
    signature: str = Field("", max_length=128, description=(
        "The stack's head signing key over policy, question, sha256 and head version (domain/signatures.py "
        "`head_signature`), made by the relearning function for what it was made for: a shadow (when its "
        "shadow starts) or service (when it is promoted); empty: unsigned."))

    def without_history(self, depth: int = 4) -> "HeadPointer":
        """This pointer with at most `depth` earlier pointers kept (an SSM parameter holds 4 KB
        in the standard tier; the audit table keeps the whole history)."""
        if self.previous is None:
            return self
        if depth <= 1:
            return self.model_copy(update={"previous": None})
        return self.model_copy(update={"previous": self.previous.without_history(depth - 1)})


def parameter_name(prefix: str, policy: str, question: str) -> str:
    """The SSM parameter that names the head in service for a policy question."""
    return f"{prefix.rstrip('/')}/{policy}/{question}"


def shadow_parameter_name(prefix: str, policy: str, question: str) -> str:
    """The SSM parameter that names the candidate serving in shadow for a policy question."""
    return f"{parameter_name(prefix, policy, question)}.shadow"


def shadow_key(policy: str, question: str) -> str:
    """The head store's key for a policy question's shadow head (S3 keeps every version of it)."""
    return f"{HEADS_FOLDER}/{policy}/{question}.shadow.json"


def head_key(policy: str, question: str) -> str:
    """The head store's key for a policy question's head (S3 keeps every version of it)."""
    return f"{HEADS_FOLDER}/{policy}/{question}.json"


def report_key(policy: str, question: str) -> str:
    """The key of the fit report promoted with the head."""
    return f"{HEADS_FOLDER}/{policy}/{question}.report.json"


def pointer_problems(pointer: HeadPointer, *, bucket: str, policy: str, question: str,
                     shadow: bool = False) -> list[str]:
    """Why the pointer may not name the head in service of `policy`/`question` in the head store
    `bucket` (empty: it may). A pointer naming another bucket, another key or another question
    would serve whatever object its writer chose."""
    problems = []
    if pointer.bucket != bucket:
        problems.append(f"names bucket {pointer.bucket!r}, not the head store {bucket!r}")
    key = shadow_key(policy, question) if shadow else head_key(policy, question)
    if pointer.key != key:
        problems.append(f"names key {pointer.key!r}, not {key!r}")
    if (pointer.policy, pointer.question) != (policy, question):
        problems.append(f"is the pointer of {pointer.policy}/{pointer.question}, not of {policy}/{question}")
    if shadow != (pointer.action == "shadow"):
        problems.append(f"says {pointer.action!r}, not {'a shadow' if shadow else 'a head in service'}")
    return problems
