"""The review completion function (template Handler: review.app.lambda_handler)."""
