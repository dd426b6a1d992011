"""The ports: what the routing code needs from the world, as protocols, and the values they hand
over, one module per concern so that each function imports only the protocols it uses (this face
names them and imports none). The adapters (`decision_router.adapters`) implement them over AWS;
each function's wiring (`decision_router.composition`) makes them once per execution environment,
and tests wire the same adapters over moto, or the in-memory fakes of tests/fakes/.

- `messaging`: `Sender` (a queue: the ticket queue, a dead-letter queue with the reason in its
  attributes), `Waiting` (a received ticket hidden on its queue until the endpoint is up again),
  `Bus` (an event on the decision bus). The webhook, the intakes and the console.
- `webhooks`: `DeliveryRecord`, `Claimed`: the webhook deliveries already taken (a replay is refused).
- `routing`: what the intakes route with: `Endpoint` (the decision model's signals for a batch of
  decisions), `Workflow` (start the routing workflow for a decision record, read an execution's
  status), `AuditWriter` (one audit row: what became of an item, and why), `PointerSource`
  (which head serves, or shadows, a question, and its bytes: the head store).
- `incidents`: the open-incident table by concern: `IncidentRows` (which incidents are open,
  correlated by their source's key), `IncidentHolds`, `IncidentGroups`, `IncidentParents`,
  `LinkIndex`, and `OpenIncidentStore` (all of them); the storage the rules of
  domain/open_incidents.py write through (`ClaimStorage`, `GroupStorage`); the rows they hand over;
  and `AlarmStateReader` (what CloudWatch says of an alarm now).
- `review`: the review side: `TaskCompleter` (a reviewer's answer handed to the execution waiting
  for it), `Executions` (the routing workflow's executions as the review side reads them, and a
  correction started by name), `CallerIdentity` and `UsedProofs` (who signed a review function
  caller's proof, and the proofs already accepted), `PendingReviews` (the pending-review index:
  one row per waiting review, put by the workflow's index writer), `EscalationMarks` (which pending reviews the review
  SLA's sweep has escalated, once each).
- `outcomes`: what an answered item leaves behind, for the routing and review functions alike:
  `ResolvedItemStore` (the resolved items kept for the console's similar items) and
  `PrecisionTallies` (the live precision's tallies of checked and corrected automatic answers).
"""
