"""The routing domain, pure code: the policies that say what to ask about the items
(decision_router.items: `policies`, `model_requests`, `heads`, `lexical`), the deterministic rules
(`rules`), the judging of the model's answers (`judging`), the decision record (`records`), the
endpoint's failures as the domain sees them (`failures`) and routing one item (`routing`). An
incident's evidence is its source's model (decision_router.evidence)."""
