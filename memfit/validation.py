"""connexion's request-body validation, with the cases it would answer with a 500 made 400s."""

from __future__ import annotations

import typing as t

from connexion.datastructures import MediaTypeDict
from connexion.exceptions import BadRequestProblem
from connexion.validators import VALIDATOR_MAP, JSONRequestBodyValidator
from starlette.types import Scope


class RequestBodyValidator(JSONRequestBodyValidator):
    async def _parse(self, stream: t.AsyncGenerator[bytes, None], scope: Scope) -> t.Any:
        try:
            return await super()._parse(stream, scope)
        except UnicodeDecodeError:
            raise BadRequestProblem(detail="the request body is not UTF-8 JSON") from None
        except RecursionError:
            raise BadRequestProblem(detail="the request body nests too deeply") from None


VALIDATORS = {**VALIDATOR_MAP, "body": MediaTypeDict({**VALIDATOR_MAP["body"], "*/*json": RequestBodyValidator})}
