"""In-memory fakes of the ports (`decision_router.domain.ports` and the adapters the flows use),
for the fast tier: each behaves as its AWS adapter does, and `tests/fakes/test_contract_*.py`
runs the same behaviours against the fake and the adapter over moto, so a fake cannot drift."""
