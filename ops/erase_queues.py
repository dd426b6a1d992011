"""Erase's queues: the messages of a dead-letter or escalation queue that carry one item (`ops.erase`).

Each queue is read once, its messages hidden `QUEUE_VISIBILITY` seconds while it is read: a message
that carries the item is deleted as soon as it is read (on a dry run only counted), every other one
made visible again at once when the read ends. An incident's event is matched as the incident
intake reads it."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator, Mapping

from decision_router.adapters.queues import new_batches, release_now
from decision_router.items import ITEM_MODELS
from ops.erase_item import ItemKey

#: Seconds a message read by erase stays hidden from other readers while the queue is read.
QUEUE_VISIBILITY = 30


class HeldQueueEraser:
    """Deletes the messages that carry one item from each queue it is given (counts them on a dry run)."""

    def __init__(self, key: ItemKey, sqs: Any, *, dry_run: bool, notes: list[str]):
        self.key, self.sqs, self.dry_run, self.notes = key, sqs, dry_run, notes
        self._severity: Mapping[str, Any] | None = None

    def erase(self, queue_url: str, name: str = "queue") -> int:
        """Delete every message of a dead-letter or escalation queue that carries the item: the
        item itself (a ticket, a record's item, an SNS message's), or an incident's event as the
        incident intake reads it (`incidents_in`); every other message is made visible again.
        A removed message that carried other incidents too (a Grafana POST of several alerts)
        is named in a note: redrive can no longer re-send them."""
        def mine(body: Any) -> bool:
            if not self.carried_by(body):
                return False
            if self.key.kind != "incident":
                return True
            others = sorted(f"{source}:{incident}" for source, incident in self.incidents_in(body)
                            if (source, incident) != (self.key.source, self.key.id))
            if others:
                self.notes.append(f"{name}: a message of {self.key} also carried incident(s) {', '.join(others)}"
                                  + (": it is kept (dry run)" if self.dry_run else
                                     ": it was removed with them (redrive cannot re-send them)"))
            return True

        return self._queue(queue_url, name, mine)

    def carried_by(self, body: Any) -> bool:
        model = ITEM_MODELS[self.key.kind]
        for value in _mappings(body):
            if value.get(model.id_field) == self.key.id and value.get(model.source_field) == self.key.source:
                return True
            if self.key.kind == "incident" and value.get("source") == self.key.source and self.key.id in _strings(value):
                return True
        return self.key.kind == "incident" and (self.key.source, self.key.id) in self.incidents_in(body)

    def incidents_in(self, body: Any) -> set[tuple[str, str]]:
        """The incidents (source, id) a dead-letter message's event is about, as the incident
        intake reads it (`ops.redrive.dead_event`: the event itself or Lambda's on-failure
        record's `requestPayload`; each SNS record alone; the source's own id: a Grafana alert
        `grafana:<fingerprint>`, a long Security Hub id digested); none when no source reads it."""
        from decision_router.intake.incidents import native_outcomes
        from decision_router.sources import raw_events, read_event
        from decision_router.sources.events import Opened, incident_id
        from ops.redrive import dead_event

        if self._severity is None:
            from decision_router.domain.policies import load_policy

            self._severity = load_policy("incident").source_severity
        event, _ = dead_event({"Body": json.dumps(body)})
        found: set[tuple[str, str]] = set()
        for each in raw_events(event):
            try:
                source, envelope = read_event(each)
                outcomes = native_outcomes(source, envelope, self._severity)
            except Exception:  # noqa: BLE001 - not a source's event, or one it refuses: matched by its fields only
                continue
            for outcome in outcomes:
                if isinstance(outcome, Opened):
                    found.add((outcome.incident.source, outcome.incident.incident_id))
                elif outcome.key is not None:
                    found.add((outcome.source, incident_id(outcome.key)))
        return found

    def _queue(self, queue_url: str, name: str, mine: Callable[[Any], bool]) -> int:
        """Read the queue once; a message `mine` picks is deleted at once, while its receipt is
        the latest, or only counted on a dry run; all others are made
        visible again at once when the read ends. A read longer than the messages stay hidden
        may have missed some (those read first came back): a note says to run erase again."""
        found = 0
        others: list[str] = []
        started = time.monotonic()
        for batch in new_batches(self.sqs, queue_url, visibility=QUEUE_VISIBILITY):
            for message in batch:
                try:
                    body = json.loads(message["Body"])
                except ValueError:
                    body = None
                if body is None or not mine(body):
                    others.append(message["ReceiptHandle"])
                    continue
                found += 1
                if self.dry_run:
                    others.append(message["ReceiptHandle"])
                    continue
                self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        release_now(self.sqs, queue_url, others)
        if time.monotonic() - started >= QUEUE_VISIBILITY:
            self.notes.append(f"{name}: read for longer than its messages stay hidden ({QUEUE_VISIBILITY} s): "
                              "some may not have been read; run erase again (a run that finds none is complete)")
        return found


def _mappings(value: Any) -> Iterator[Mapping[str, Any]]:
    """Every JSON object within `value`, and within the JSON text of its strings (an SNS
    message, a record's item kept as text)."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return
    if isinstance(value, Mapping):
        yield value
        for inner in value.values():
            yield from _mappings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _mappings(inner)


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, Mapping):
        return set().union(*(_strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return set()

