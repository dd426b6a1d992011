"""An incident's severity (sev1-sev4) and the policy's table that maps a native source's own
severity label to it. Data in the policy, so an operator changes the mapping without code."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Severity = Literal["sev1", "sev2", "sev3", "sev4"]


class SeverityTable(BaseModel):
    """How one native source's own severity becomes an incident's `severity` (sev1-sev4). The
    severity stays evidence; the priority is still decided by the rules and the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)] = Field(
        description="Which field of the source's event gives the label.")
    labels: dict[str, Severity] = Field(description="The source's label (matched ignoring case) → severity.")
    default: Severity = Field(description="When the source gives no label, or one not in `labels`.")
    correlate_by: Literal["alert", "group"] = Field(
        "alert", description="A source that sends several alerts in one event (Grafana): `alert`, one incident "
                             "per alert (its fingerprint); `group`, one incident per group the source sent them "
                             "in (its groupKey), resolved when the whole group is. Other sources ignore it.")

    def severity(self, label: str | None) -> Severity:
        wanted = (label or "").casefold()
        return next((sev for name, sev in self.labels.items() if name.casefold() == wanted), self.default)
