"""Objects rendered once per kind of deployment, and renamed for the other deployments of it.

A platform often runs many deployments that differ only by name: the same model, instance,
engine and settings, with the name repeated in their own fields (a weights prefix
``models/<name>/``). Objects that depend on the spec alone (a deployment's monitors, alerts and
dashboard) are then the same objects with another name in them, and :class:`RenamedKinds`
renders them once per kind and renames them for the others, where that gives exactly what
rendering would.

- A deployment's **kind** is its spec's plain data (the fields it sets, as a platform file
  would give them; no field is excluded from a dump) with its name replaced by
  :data:`SENTINEL` in every string (:func:`kind_of`). Two deployments of one kind differ by
  their names alone.
- A kind's **template** is rendered once from that data, validated as a spec named
  :data:`SENTINEL`; a deployment's objects are the template with the sentinel replaced by its
  name in every string, keys included. Names the objects derive from the name other than by
  writing it (a hash of it) are the render's arguments, computed from the deployment's name
  and renamed from stand-ins of their own, so that the template holds the name only as written.
- Renaming is exact only if the render writes the name and does nothing else with it, which
  is for each render to keep, engines included. So a kind is renamed only once renaming its
  template gave, key order and types included, what fresh renders give for its first
  deployment and for the kind named :data:`SHORT_NAME`. The sentinel is the longest name,
  holding a letter, a digit and a dash, and sorts after nearly every name; the short name is
  the shortest, sorting first: a hash, a length, an escape or an order that depends on the
  name, or a name cut to fit, fails a check. A kind that fails, or whose data is no spec under
  another name (a string holding the name is an instance type), is rendered afresh for every
  deployment.

A kind seen once costs its spec's dump; the checks run when its second deployment arrives.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from eks_inference.specification.deployment import ModelDeploymentSpec

Json = dict[str, Any]
# What renders a deployment's objects from its spec and the names derived from its name
# (by label, see RenamedKinds).
Render = Callable[[ModelDeploymentSpec, Mapping[str, str]], list[Json]]

# The name a kind's template is rendered with: a DNS-1123 label of the 40 characters a name may
# have, with a digit and a dash, that no spec holds (kind_of refuses one that does). No proper
# prefix of it is also its suffix, so replacing it finds only the occurrences written as one.
SENTINEL = "z" * 37 + "-0y"
# The name of the second check: the shortest, first in order.
SHORT_NAME = "a"


class _NotRenamableError(Exception):
    """A value holding something other than JSON data, which renaming does not reach into."""


def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` (JSON data: dicts, lists, tuples, strings, numbers, booleans and ``None``) with
    ``old`` replaced by ``new`` in every string, mapping keys included; new containers."""
    kind = type(value)
    if kind is str:
        text: str = value.replace(old, new)
        return text
    if kind is dict:
        return {_renamed(key, old, new): _renamed(item, old, new) for key, item in value.items()}
    if kind is list:
        return [_renamed(item, old, new) for item in value]
    if kind is tuple:
        return tuple(_renamed(item, old, new) for item in value)
    if kind in (int, float, bool) or value is None:
        return value
    raise _NotRenamableError(kind.__name__)


def _identical(first: Any, second: Any) -> bool:
    """Whether two values of JSON data are the same data written the same way: the same types,
    mapping keys in the same order (``==`` on dicts ignores it; the manifests do not), and
    floats of the same text."""
    if type(first) is not type(second):
        return False
    if type(first) is dict:
        return list(first) == list(second) and all(
            _identical(item, second[key]) for key, item in first.items()
        )
    if type(first) in (list, tuple):
        return len(first) == len(second) and all(map(_identical, first, second))
    return bool(first == second) and repr(first) == repr(second)


def _holds_sentinel(value: Any) -> bool:
    return SENTINEL in repr(value)


# Where a string is in a template's objects: the keys and indexes leading to its container,
# and its own key or index there.
_Path = tuple[Any, ...]


def _at(objects: Any, path: _Path) -> Any:
    for step in path:
        objects = objects[step]
    return objects


@dataclass(frozen=True)
class _Template:
    """A kind's objects, to copy and rename for one deployment: pickled (a copy is one
    ``pickle.loads``, of exactly the same types and key order), with where the strings
    holding :data:`SENTINEL` are (``slots``) and the mappings whose keys hold it (``keyed``,
    deepest first)."""

    data: bytes
    slots: tuple[tuple[_Path, Any], ...]
    keyed: tuple[_Path, ...]

    @classmethod
    def of(cls, objects: list[Json]) -> _Template:
        """The template of ``objects``; :class:`_NotRenamableError` if they hold other than
        JSON data, or the sentinel inside a tuple (which a copy could not change)."""
        slots: list[tuple[_Path, Any]] = []
        keyed: list[_Path] = []

        def visit(value: Any, path: _Path) -> None:
            kind = type(value)
            if kind is dict:
                if any(type(key) is not str for key in value):
                    raise _NotRenamableError("a key that is not a string")
                if any(SENTINEL in key for key in value):
                    keyed.append(path)
                items: Any = value.items()
            elif kind is list:
                items = enumerate(value)
            elif kind is tuple:
                if _holds_sentinel(value):
                    raise _NotRenamableError("the name in a tuple")
                return
            elif kind in (str, int, float, bool) or value is None:
                return
            else:
                raise _NotRenamableError(kind.__name__)
            for slot, item in items:
                if type(item) is str:
                    if SENTINEL in item:
                        slots.append((path, slot))
                else:
                    visit(item, (*path, slot))

        visit(objects, ())
        keyed.sort(key=len, reverse=True)
        return cls(pickle.dumps(objects, pickle.HIGHEST_PROTOCOL), tuple(slots), tuple(keyed))

    def renamed(self, replace: Callable[[str], str]) -> list[Json]:
        """A copy of the objects with ``replace`` applied to every string holding the
        sentinel, keys included (strings first: their paths go through the keys as they were)."""
        objects: list[Json] = pickle.loads(self.data)
        for path, slot in self.slots:
            container = _at(objects, path)
            container[slot] = replace(container[slot])
        for path in self.keyed:
            mapping = _at(objects, path)
            _at(objects, path[:-1])[path[-1]] = {
                replace(key) if SENTINEL in key else key: item for key, item in mapping.items()
            }
        return objects


@dataclass
class _Kind:
    """One kind's first deployment and its objects, then the kind's template once checked
    (``None``: renamed from nothing, its deployments are rendered afresh)."""

    first_name: str
    objects: list[Json]
    spec: Json
    template: _Template | None = None
    checked: bool = False


def kind_of(spec: ModelDeploymentSpec) -> Json | None:
    """``spec`` as plain data with its name replaced by :data:`SENTINEL` in every string: equal
    for two deployments that differ by their names alone. ``None`` when the spec holds the
    sentinel already, where the replacement could not be undone."""
    dump = spec.model_dump(mode="json", exclude_unset=True)
    if _holds_sentinel(dump):
        return None
    kind: Json = _renamed(dump, spec.name, SENTINEL)
    return kind


# A kind, by its spec's type and plain data.
_KindKey = tuple[type[ModelDeploymentSpec], str]


@dataclass
class RenamedKinds:
    """``render``'s objects for each deployment, rendered once per kind and renamed for the
    others of that kind (see the module).

    ``derived`` names the names the objects derive from the deployment's name other than by
    writing it (a dashboard uid holding a hash of it), each with the function computing it:
    ``render`` takes them by label and uses them as given. Objects come back as new
    containers, never the template's.
    """

    render: Render
    derived: Mapping[str, Callable[[str], str]] = field(default_factory=dict)
    _kinds: dict[_KindKey, _Kind] = field(default_factory=dict, init=False, repr=False)
    # The sentinel and the stand-ins, longest first.
    _sentinels: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        stand_ins = sorted(map(self._stand_in, self.derived), key=len, reverse=True)
        self._sentinels = re.compile("|".join(map(re.escape, (*stand_ins, SENTINEL))))

    def objects(self, spec: ModelDeploymentSpec) -> list[Json]:
        """The objects ``render`` makes for ``spec``."""
        kind_spec = kind_of(spec)
        if kind_spec is None:
            return self._fresh(spec)
        key = (type(spec), repr(kind_spec))
        kind = self._kinds.get(key)
        if kind is None:
            first = self._fresh(spec)
            self._kinds[key] = _Kind(spec.name, first, kind_spec)
            return first
        if not kind.checked:
            kind.template = self._checked_template(kind, type(spec))
            kind.checked = True
        if kind.template is None:
            return self._fresh(spec)
        return kind.template.renamed(self._naming(spec.name))

    def _fresh(self, spec: ModelDeploymentSpec) -> list[Json]:
        derived = {label: derive(spec.name) for label, derive in self.derived.items()}
        return self.render(spec, derived)

    def _stand_in(self, label: str) -> str:
        return f"{SENTINEL}-{label}"

    def _naming(self, name: str) -> Callable[[str], str]:
        """Renaming of a template for the deployment ``name``: the sentinel and the stand-ins,
        each replaced at once (a replacement is never searched again)."""
        table = {self._stand_in(label): derive(name) for label, derive in self.derived.items()}
        table[SENTINEL] = name
        pattern = self._sentinels
        return lambda text: pattern.sub(lambda match: table[match.group()], text)

    def _checked_template(
        self, kind: _Kind, spec_type: type[ModelDeploymentSpec]
    ) -> _Template | None:
        """The kind's template, if renaming it gives what rendering gives for the kind's first
        deployment and for the kind under :data:`SHORT_NAME`; ``None`` otherwise."""
        try:
            spec = spec_type.model_validate(kind.spec)
            short = spec_type.model_validate(_renamed(kind.spec, SENTINEL, SHORT_NAME))
        except ValidationError:
            # A string holding the name means something under it (an instance type).
            return None
        stand_ins = {label: self._stand_in(label) for label in self.derived}
        try:
            template = _Template.of(self.render(spec, stand_ins))
            renamed = [template.renamed(self._naming(n)) for n in (kind.first_name, SHORT_NAME)]
            fresh = self._fresh(short)
        except Exception:
            # Whatever fails under another name than the first deployment's (a rule on the
            # name, a value the renaming does not reach into): the kind depends on its name
            # otherwise than by writing it.
            return None
        if _identical(renamed[0], kind.objects) and _identical(renamed[1], fresh):
            return template
        return None
