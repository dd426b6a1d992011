"""The pending-review index writer (template Handler: review_index_writer.app.lambda_handler)."""
