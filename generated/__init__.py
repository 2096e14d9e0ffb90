"""Generated from the repository's openapi.yaml by scripts/regenerate; never edited by hand.

models.py: the pydantic wire models (datamodel-code-generator); plain_models.py: the same models as stdlib
dataclasses, no pydantic (what the CLI's tables are built with: a tenth of a second less start-up); openapi.yaml: a
copy of the contract, so that an installed wheel carries the spec it serves.
"""
