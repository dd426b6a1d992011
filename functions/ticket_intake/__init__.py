"""The ticket intake function (template Handler: ticket_intake.app.lambda_handler)."""
