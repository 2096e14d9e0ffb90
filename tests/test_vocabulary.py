"""The contract's words are named once in estimator/vocabulary.py, and that file cannot drift from openapi.yaml:
every list of words a field's description gives is exactly the enum that code uses for it."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest
import yaml

from memfit.estimator.vocabulary import (
    Basis,
    BudgetBasis,
    Component,
    ContextSource,
    FlashAttention,
    Limit,
    Mode,
    ModelSource,
    ObservationFlag,
    ProblemType,
    Profile,
    Refusal,
    Residency,
    SettingSource,
    Verdict,
)

SPEC = yaml.safe_load((Path(__file__).resolve().parent.parent / "openapi.yaml").read_text())
WORD = re.compile(r"`([a-z][A-Za-z]*)`")  # a backticked contract word (not a flag such as `--budget total`)

FIELDS = [
    (Component, "WireFitMemoryPart", "component"),
    (Basis, "WireFitMemoryPart", "basis"),
    (Verdict, "WireFitVerdictResult", "verdict"),
    (Refusal, "WireFitMemoryEstimate", "refusal"),
    (Limit, "WireFitVerdictResult", "limits"),
    (BudgetBasis, "WireFitBudget", "basis"),
    (ContextSource, "WireFitWorkload", "contextSource"),
    (Mode, "WireFitWorkload", "mode"),
    (FlashAttention, "WireFitWorkload", "flashAttention"),
    (ModelSource, "WireModelEntry", "source"),
    (ObservationFlag, "WireObservationReceipt", "flags"),
    (ProblemType, "Problem", "type"),
    (Residency, "WireFitMemoryPart", "residency"),
    (SettingSource, "WireResolvedSetting", "source"),
    (Profile, "WireFitVerdictRequest", "profile"),
]


@pytest.mark.parametrize(("words", "schema", "field"), FIELDS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_words_of_a_field_are_exactly_its_enum(words: type[StrEnum], schema: str, field: str) -> None:
    description = SPEC["components"]["schemas"][schema]["properties"][field]["description"]
    assert set(WORD.findall(description)) == {w.value for w in words}


def test_weakest_basis_orders_the_bases_as_the_spec_does() -> None:
    description = SPEC["components"]["schemas"]["WireFitMemoryEstimate"]["properties"]["weakestBasis"]["description"]
    assert set(WORD.findall(description)) == {b.value for b in Basis}


def test_the_request_names_every_flash_attention_setting() -> None:
    description = SPEC["components"]["schemas"]["WireFitVerdictRequest"]["properties"]["flashAttention"]["description"]
    assert {f.value for f in FlashAttention} <= set(WORD.findall(description))


def test_the_suggestions_cap_is_the_contracts() -> None:
    from memfit.wire import MAX_SUGGESTIONS

    assert SPEC["components"]["schemas"]["Suggestions"]["maxItems"] == MAX_SUGGESTIONS
