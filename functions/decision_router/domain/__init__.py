"""The routing domain, pure code: the items (`items`), the policies that say what to ask about
them (`policies`, `model_requests`, `heads`, `lexical`), the deterministic rules (`rules`), the
judging of the model's answers (`judging`), the decision record (`records`), the endpoint's
failures as the domain sees them (`failures`) and routing one item (`routing`). An incident's
evidence is the model its source declares (decision_router.sources)."""
