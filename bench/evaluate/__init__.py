"""Evaluation and calibration of decisions: `python -m bench.evaluate --help`."""
