"""Model ids as people type them: what a lookup reads of the id a request names."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

# A Hugging Face Hub id: org/repo, a quant tag, a revision (a branch, a tag, refs/pr/N, a commit)
HUB_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})"
    r"(?::(?P<tag>[A-Za-z0-9][A-Za-z0-9_.-]{0,63}))?(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9_./-]{0,127}))?$"
)
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A Hub repository's address as Ollama (`ollama run hf.co/org/repo:QUANT`) and browsers write it
HUB_PREFIXES = ("https://huggingface.co/", "https://hf.co/", "huggingface.co/", "hf.co/")


def typed_id(model_id: str) -> str:
    """The id a lookup reads: surrounding whitespace dropped, and a Hub address read as its `org/repo:QUANT`."""
    model_id = model_id.strip()
    lowered = model_id.lower()
    for prefix in HUB_PREFIXES:
        if lowered.startswith(prefix):
            return model_id[len(prefix) :]
    return model_id


_WORDS = re.compile(r"[-_.\s]+")
NEAREST = 3  # repositories suggested for an id that names none
CLOSE = 0.6  # difflib's ratio a name must reach to be suggested
# The most of an asked name that is compared: difflib's ratio costs time in proportion to the length, and an id
# may be as long as a request body allows
COMPARED = 256


@dataclass(frozen=True)
class Suggestions:
    """What to offer for an id that names no known model."""

    repository: str | None  # the known repository the id names (spelled as known), when its quant is not one of them
    quants: tuple[str, ...]  # that repository's quants
    nearest: tuple[str, ...]  # known ids of the repositories whose names come closest

    @property
    def ids(self) -> list[str]:
        """Every suggested id, the repository's own quants first."""
        own = [f"{self.repository}:{q}" for q in self.quants]
        return own + [n for n in self.nearest if n not in own]


def _repository(model_id: str) -> str:
    return model_id.partition(":")[0]


def _name(model_id: str) -> str:
    """What people remember of an id: the repository's name, without its organisation or quant, in any case."""
    return _repository(model_id).rpartition("/")[2].lower()


def suggestions(missing: str, known: Sequence[str]) -> Suggestions:
    """For an id no model answers to: the quants of the repository it names, if that one is known, and the known
    ids of the NEAREST repositories by name (an id with the same quant where one has it)."""
    typed = typed_id(missing)
    repo, _, quant = typed.partition(":")
    own = [k for k in known if _repository(k).lower() == repo.lower()]
    quants = tuple(sorted({k.partition(":")[2] for k in own if ":" in k}))
    repository = _repository(own[0]) if quant and quants and quant.upper() not in quants else None
    by_name: dict[str, list[str]] = {}
    for k in known:
        if _repository(k).lower() != repo.lower() or repository is None:
            by_name.setdefault(_name(k), []).append(k)
    asked = _name(typed)[:COMPARED]
    ranked = sorted(((_closeness(asked, n), n) for n in by_name), reverse=True)
    names = [n for (prefix, ratio), n in ranked[:NEAREST] if prefix or ratio >= CLOSE]
    nearest = tuple(_pick(by_name[n], quant) for n in names)
    return Suggestions(repository, quants if repository else (), nearest)


def _closeness(asked: str, name: str) -> tuple[int, float]:
    """How near a name is to the one asked: the words they begin with in common (a family and its size, as in
    `qwen3-4b-...`), then difflib's ratio of the whole."""
    prefix = 0
    for a, b in zip(_WORDS.split(asked), _WORDS.split(name), strict=False):
        if a != b:
            break
        prefix += 1
    matcher = difflib.SequenceMatcher(None, asked, name)
    if not prefix and matcher.real_quick_ratio() < CLOSE:  # the lengths alone keep it from being suggested
        return 0, 0.0
    return prefix, matcher.ratio()


def _pick(ids: list[str], quant: str) -> str:
    """Of one name's ids, the one with `quant` (any case), else the first."""
    return next((i for i in ids if i.partition(":")[2].lower() == quant.lower()), ids[0]) if quant else ids[0]


@dataclass(frozen=True)
class HubId:
    """`org/repo[:QUANT][@revision]`: a repository of the Hub, one of its quants (else its default), a revision."""

    repo: str
    tag: str = ""
    revision: str = "main"

    @property
    def key(self) -> tuple[str, str, str]:
        return self.repo.lower(), self.tag.upper(), self.revision


def hub_id(model_id: str) -> HubId | None:
    """The Hub repository, quant and revision an id names; None for one that is not a Hub id (a path of a model
    directory, an Ollama name, anything with `..`). Ids are looked up, never used as paths: only these characters
    reach a URL, and huggingface_hub quotes the revision."""
    match = HUB_ID.match(model_id)
    if match is None or ".." in model_id or "--" in match["repo"]:
        return None
    return HubId(match["repo"], match["tag"] or "", match["revision"] or "main")
