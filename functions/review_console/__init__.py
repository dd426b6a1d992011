"""The review console function (template Handler: review_console.app.lambda_handler)."""
