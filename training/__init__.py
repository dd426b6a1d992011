"""Fit learned heads for policy questions from labelled decisions (`make fit`)."""
