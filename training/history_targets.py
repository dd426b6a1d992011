"""`make fit-history`'s targets: each option's destination, checked against the deployment's
(`--destinations`, else the ticket function's DESTINATION_QUEUES in template.yaml) before anything
is scored; where the labels are no destinations, a starting map to edit, and how to give the new
destinations queues (`make queues`, local/destinations.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from local.destinations import nearest_destination

from .history_policy import HistoryError, Vocabulary, check_destinations, read_targets, starting_targets

#: The starting targets map a run writes into OUT when the labels are no destinations: a name no
#: user's map there is likely to have, and never counted as OUT being used (check_out).
STARTING_MAP = "targets.start.json"


def deployment_destinations(destinations: str | None) -> list[str]:
    """The destination keys the deployment routes to: --destinations (comma-separated), else the
    ticket function's DESTINATION_QUEUES in template.yaml (what `make demo` and a deployed stack have)."""
    if destinations:
        return [d.strip() for d in destinations.split(",") if d.strip()]
    from local.destinations import template_destinations

    return template_destinations()


def resolve_targets(targets_map: str | None, deployment: str | None, out: Path, vocab: Vocabulary,
                    say: Callable[[str], None]) -> dict[str, str] | None:
    """Each option's destination, checked against the deployment's (`deployment`: --destinations)
    before anything is scored: --targets (`targets_map`: a map, wherever it is, or 'own'), else the
    labels' own names when each is a destination; else a starting map (each label a destination of
    its own name) is written to OUT/STARTING_MAP and HistoryError says to edit it and pass it, and
    how to add the queues."""
    if targets_map == "own":
        return None
    destinations = deployment_destinations(deployment)
    if targets_map:
        targets = read_targets(Path(targets_map), vocab)
        check_destinations(targets, destinations, f"--targets {targets_map}",
                           how=lambda unknown: how_to_add(deployment, unknown, targets_map))
        return targets
    own = starting_targets(vocab)
    if all(t in destinations for t in own.values()):
        say("each label is a destination's name: it routes there")
        return own
    path: Path = out / STARTING_MAP
    if path.exists():
        raise HistoryError(f"the labels are not the deployment's destinations ({', '.join(destinations)}), and {path} is "
                           f"already there: check it, then run again with TARGETS={path} (--targets {path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(own, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    new = sorted({t for t in own.values() if t not in destinations})
    hints = [f"{label!r} → {nearest}" for label, target in own.items() if target in new
             and (nearest := nearest_destination(target, destinations))]
    raise HistoryError(
        f"the labels are not the deployment's destinations ({', '.join(destinations)}): wrote {path}, each label "
        f"routed to a destination of its own name; the deployment has no queue for {len(new)} of them "
        f"({', '.join(new[:8])}{' …' if len(new) > 8 else ''}). Either give them queues: {how_to_add(deployment, new, path)}; "
        f"or edit the map so those labels route to destinations the deployment has"
        + (f" (nearest by name: {', '.join(hints[:8])}{' …' if len(hints) > 8 else ''})" if hints else "")
        + f" (\"*\": every label not named). Then run again with TARGETS={path} (--targets {path}), or with the map "
        "copied anywhere; nothing was scored")


def how_to_add(deployment: str | None, unknown: list[str], targets_map: str | Path) -> str:
    """How the deployment gets a queue for each of `unknown`: `make queues` on the map that names
    them, unless --destinations (`deployment`) names another deployment's."""
    if deployment:
        return "in the deployment that --destinations describes (its DESTINATION_QUEUES)"
    from local.destinations import add_queues_advice, template_resources

    return add_queues_advice(unknown, template_resources(), targets_map=targets_map)
