"""Generated from the repository's openapi.yaml by scripts/regenerate; never edited by hand.

models.py: the pydantic wire models (datamodel-code-generator); openapi.yaml: a copy of the contract, so that an
installed wheel carries the spec it serves.
"""
