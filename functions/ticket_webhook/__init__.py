"""The ticket webhook function (template Handler: ticket_webhook.app.lambda_handler)."""
