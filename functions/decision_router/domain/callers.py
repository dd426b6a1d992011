"""Who may answer a review through the review function, and what their proof is bound to.

The review function's caller proves who they are with an STS GetCallerIdentity request they
presign (adapters/caller_identity.py). What this module decides, with no AWS call:

- `answer_binding`: the digest the proof must sign in the `X-Decision-Router-Answer` header: this
  stack's review function (its name), the execution, the task token, the answers and the note. STS
  verifies the signature over that header, and the function recomputes the digest from the answer
  it got: a proof answers that one answer, never another review, another answer or another stack.
- `ReviewerPrincipals`: the principals whose answers count, as the stack's `ReviewerPrincipals`
  parameter lists them; only principals of the stack's own account are ever admitted.
- `shown_name`: how a proven principal is named to people (its user name, or its role session's
  name): never a name the caller typed.

An assumed role's identity is the role and the session name together (STS names the session
`arn:aws:sts::<account>:assumed-role/<role>/<session>`, without the role's path): two people
reach one identity only when the role lets its callers choose the session name, which is why
docs/security.md asks for a trust policy that pins it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping

from .signatures import IdentityNotProven, iam_identity

#: The header a proof signs to bind itself to one answer (lower case: as SigV4 lists it).
ANSWER_HEADER = "x-decision-router-answer"
#: What X-Amz-SignedHeaders must be, exactly: the host and the answer's binding.
SIGNED_HEADERS = f"host;{ANSWER_HEADER}"
#: The template parameter that lists the reviewers (named in every refusal it causes).
PARAMETER = "ReviewerPrincipals"
_BINDING_PURPOSE = "decision-router-answer/1"


def answer_binding(audience: str, execution_name: str, task_token: str, answers: Mapping[str, str],
                   note: str = "") -> str:
    """Hex SHA-256 of what one answer is: the review function it is sent to (`audience`, its
    name), the execution, the task token, the answers (canonical JSON) and the note."""
    message = json.dumps([_BINDING_PURPOSE, audience, execution_name, task_token, dict(sorted(answers.items())),
                          note], ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(message.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ProvenCaller:
    """What STS proved: the principal's ARN; the proof's key (a hash of its signature: what is
    remembered so it answers once) and when it stops being valid (epoch seconds)."""

    arn: str
    proof_key: str
    expires_at: int


@dataclass(frozen=True)
class Arn:
    partition: str
    service: str
    account: str
    resource: str

    @classmethod
    def parse(cls, text: str) -> Arn | None:
        parts = text.split(":", 5)
        if len(parts) != 6 or parts[0] != "arn" or not all(parts[1:3]) or not parts[5]:
            return None
        return cls(parts[1], parts[2], parts[4], parts[5])


@dataclass(frozen=True)
class Invoked:
    """The review function as Lambda invoked it (its context's invoked_function_arn): the stack's
    partition and account, and its name, the audience a proof is bound to."""

    partition: str
    account: str
    function_name: str

    @classmethod
    def of(cls, function_arn: str) -> Invoked:
        arn = Arn.parse(function_arn or "")
        resource = arn.resource.split(":") if arn else []
        if arn is None or arn.service != "lambda" or not arn.account or len(resource) < 2 or resource[0] != "function":
            raise ValueError(f"not a Lambda function ARN: {function_arn!r}")
        return cls(arn.partition, arn.account, resource[1])


def audience(function: str) -> str:
    """The name a proof is bound to, from what a caller addresses the function by: its name, its
    ARN or partial ARN, with or without a version or alias."""
    return function.split("function:")[-1].split(":")[0]


@dataclass(frozen=True)
class Reviewer:
    """An admitted caller: `identity` is what labels count under, `shown` what people read."""

    identity: str
    shown: str


def shown_name(arn: str) -> str:
    """A proven principal's name for people: an IAM user's name, an assumed role's session name
    (the person, where the trust policy pins it), else the ARN's last part."""
    parsed = Arn.parse(arn)
    if parsed is None:
        return arn
    kind, _, rest = parsed.resource.partition("/")
    if kind == "assumed-role" and "/" in rest:
        return rest.split("/", 1)[1]
    return parsed.resource.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ReviewerPrincipals:
    """The principals of one account whose answers count. Each entry (comma-separated) is one of:

    - `arn:<partition>:iam::<account>:role/[<path>/]<name>`, or `role/<name>`: every session of
      that role (STS names a session without the role's path; a role's name is unique in its
      account, so the name alone is that role);
    - `arn:...:role/<prefix>*` or `role/<prefix>*`: every session of the roles whose name starts so;
    - `arn:<partition>:iam::<account>:user/[<path>/]<name>`, or `user/...`: that IAM user;
    - any other ARN of the account: that principal exactly, as STS names it.

    An entry of another account or partition is refused: so is any caller of another account,
    whatever the list."""

    partition: str
    account: str
    roles: frozenset[str] = frozenset()
    role_prefixes: tuple[str, ...] = ()
    exact: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str, *, account: str, partition: str = "aws") -> ReviewerPrincipals:
        roles, prefixes, exact = set(), [], set()
        for entry in (e.strip() for e in (text or "").split(",")):
            if not entry:
                continue
            if entry.startswith(("role/", "user/")):
                entry = f"arn:{partition}:iam::{account}:{entry}"
            arn = Arn.parse(entry)
            if arn is None:
                raise IdentityNotProven(f"{PARAMETER}: {entry!r} is not an ARN (nor role/<name>, user/<name>)")
            if (arn.partition, arn.account) != (partition, account):
                raise IdentityNotProven(f"{PARAMETER}: {entry!r} is not of this stack's account ({account}): "
                                        "only this account's principals may answer reviews")
            kind, _, name = arn.resource.partition("/")
            if arn.service == "iam" and kind == "role" and name:
                if name.endswith("*"):
                    if "/" in name or "*" in name[:-1]:
                        raise IdentityNotProven(f"{PARAMETER}: {entry!r}: a wildcard matches a role name's start; STS "
                                                "names a role's session without its path, so a path cannot be matched")
                    prefixes.append(name[:-1])
                else:
                    roles.add(name.rsplit("/", 1)[-1])
            elif "*" in entry:
                raise IdentityNotProven(f"{PARAMETER}: {entry!r}: only a role name may end in *")
            else:
                exact.add(entry)
        return cls(partition, account, frozenset(roles), tuple(prefixes), frozenset(exact))

    def __bool__(self) -> bool:
        return bool(self.roles or self.role_prefixes or self.exact)

    def require_some(self) -> ReviewerPrincipals:
        """Itself, or IdentityNotProven when it lists nobody (the parameter's default)."""
        if not self:
            raise IdentityNotProven(f"caller: this stack lists no reviewer principals: answers through the review "
                                    f"function are refused until the stack's {PARAMETER} parameter names the roles "
                                    "(or users) whose answers count (docs/security.md); the console needs none")
        return self

    def admit(self, arn: str) -> Reviewer:
        """The proven caller as a reviewer, or IdentityNotProven naming why it may not answer."""
        parsed = Arn.parse(arn)
        if parsed is None:
            raise IdentityNotProven(f"caller: STS answered {arn!r}, not an ARN")
        if (parsed.partition, parsed.account) != (self.partition, self.account):
            raise IdentityNotProven(f"caller: {arn} is not of this stack's account ({self.account}): only this "
                                    "account's principals may answer reviews")
        self.require_some()
        kind, _, rest = parsed.resource.partition("/")
        role = rest.split("/", 1)[0] if parsed.service == "sts" and kind == "assumed-role" and "/" in rest else None
        if arn in self.exact or (role is not None and (role in self.roles
                                                       or any(role.startswith(p) for p in self.role_prefixes))):
            return Reviewer(identity=iam_identity(arn), shown=shown_name(arn))
        raise IdentityNotProven(f"caller: {arn} is not one of the reviewer principals the stack's {PARAMETER} "
                                "parameter lists")
