"""Preflight's ground: its result lines, how an AWS error reads, and the read-only guard (`ops.preflight`).

Every client a check uses is `guarded`: any operation but Get*, List*, Describe* and Head* is refused
before its request is built, so preflight cannot write, whatever the credentials allow."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from decision_router.adapters.caller_identity import sts_client
from ops.preflight_deployment import Deployment

#: The page with every check, the permissions it needs and what it cannot check.
DOCS = "docs/operations/preflight.md"
IMAGE_DOCS = "docs/container/image.md"
MODEL_DOCS = "docs/container/model-package.md"
ON_CALL_DOCS = "docs/destinations/on-call.md"
QUICKSTART = "docs/quickstart.md"

#: `make fit-history ON=sagemaker`'s Processing instance type when INSTANCE_TYPE is not given
#: (training/history.py's --instance-type default; a test holds the two together).
DEFAULT_PROCESSING_INSTANCE_TYPE = "ml.c7i.8xlarge"

#: The only operations preflight makes: reads.
READ_ONLY = re.compile(r"^(Get|List|Describe|Head)[A-Z]")
#: Error codes of a call the credentials may not make.
DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError", "403", "Forbidden"}

OK, FAIL, WARN = "✓", "✗", "!"


class WriteRefused(RuntimeError):
    """Preflight was about to make a call that is not a read."""


# ------------------------------------------------------------------------------------ results
@dataclass
class Result:
    mark: str  # OK, FAIL or WARN
    check: str  # credentials, parameters, stack, quota, endpoint, image, model, pages
    text: str  # whole sentences
    fixes: list[str] = field(default_factory=list)  # "run: …" / "read: …"

    def lines(self) -> list[str]:
        return [f"{self.mark} {self.check}: {self.text}", *(f"    {fix}" for fix in self.fixes)]


def code_of(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def message_of(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Message", "")) or str(error)


def is_client_error(error: Exception) -> bool:
    return getattr(error, "response", None) is not None


def not_checked(check: str, what: str, actions: str, error: Exception) -> Result:
    """A check the credentials could not make (denied) or that AWS did not answer: a warning."""
    if code_of(error) in DENIED:
        return Result(WARN, check, f"{what} was not checked: your credentials may not call {actions}. "
                                   f"Add the read-only permissions listed in {DOCS} to check it.")
    return Result(WARN, check, f"{what} was not checked: {type(error).__name__}: {message_of(error)}. "
                               f"See {DOCS} for what this check needs.")


def guarded(client: Any) -> Any:
    """CLIENT, refusing every operation but a read before its request is built (before-parameter-build
    runs for every call, even one a Stubber answers)."""
    client.meta.events.register("before-parameter-build", refuse_writes, unique_id="decision-router-preflight-read-only")
    return client


def refuse_writes(model: Any = None, **_: Any) -> None:
    """`before-parameter-build` guard: any operation but a read is refused before its request is built."""
    name = getattr(model, "name", "")
    if not READ_ONLY.match(name):
        raise WriteRefused(f"preflight makes read-only calls only, and {name} is not one")


class Checks:
    """What every check reads: the deployment, its region, and a guarded client of each service.
    `clients` replaces the session's client of a service."""

    def __init__(self, session: Any, deployment: Deployment, *, processing_instance_type: str = DEFAULT_PROCESSING_INSTANCE_TYPE,
                 processing_instances: int = 1, processing_named: bool = False, clients: Mapping[str, Any] | None = None):
        self.session = session
        self.deployment = deployment
        self.region = deployment.region
        self.processing_instance_type = processing_instance_type
        self.processing_instances = processing_instances
        self.processing_named = processing_named  # INSTANCE_TYPE or INSTANCES given: a shortfall is ✗
        self._clients: dict[str, Any] = {}
        for service, client in (clients or {}).items():
            self._clients[service] = guarded(client)
        self.account: str | None = None
        self.stack_exists = False

    def client(self, service: str) -> Any:
        """The client of SERVICE in the deployment's region, every call of it through the read-only guard."""
        if service not in self._clients:
            self._clients[service] = guarded(sts_client(self.region, session=self.session) if service == "sts"
                                             else self.session.client(service, region_name=self.region))
        return self._clients[service]
