"""Pydantic models generated from memfit/openapi.yaml by scripts/regenerate. Do not edit models.py by hand."""
