"""Decision Router's routing domain: items, policies, rules, calibration and routing.

Pure code (no boto3): the adapters in `decision_router.adapters` are the only AWS users.
"""
