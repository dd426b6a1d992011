"""The incident intake function (template Handler: incident_intake.app.lambda_handler)."""
