"""The base of every generated wire model: camelCase on the wire, snake_case in Python, both accepted."""

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
