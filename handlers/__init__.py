"""Thin HTTP handlers: take the validated body, call the estimator, answer with a generated model."""
