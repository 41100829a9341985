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
  deployment and for the kind named :data:`SHORT_NAME`. The sentinel is the longest name, of
  every character a name may hold, sorting after nearly every name; the short name is the
  shortest, sorting first: a hash, a length, an escape or an order that depends on the name,
  or a name cut to fit, fails a check. A kind that fails, or whose data is no spec under
  another name (a string holding the name is an instance type), is rendered afresh for every
  deployment.

A kind seen once costs its spec's dump; the checks run when its second deployment arrives.
"""

from __future__ import annotations

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


def _renamed(value: Any, replace: Callable[[str], str]) -> Any:
    """``value`` (JSON data: dicts, lists, tuples, strings, numbers, booleans and ``None``) with
    ``replace`` applied to every string, mapping keys included; new containers throughout."""
    kind = type(value)
    if kind is str:
        return replace(value)
    if kind is dict:
        return {replace(key): _renamed(item, replace) for key, item in value.items()}
    if kind is list:
        return [_renamed(item, replace) for item in value]
    if kind is tuple:
        return tuple(_renamed(item, replace) for item in value)
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


def _replacer(table: Mapping[str, str]) -> Callable[[str], str]:
    """A function replacing every key of ``table`` in a string by its value, all at once (a
    replacement is never searched again)."""
    if len(table) == 1:
        ((old, new),) = table.items()
        return lambda text: text.replace(old, new)
    pattern = re.compile("|".join(re.escape(old) for old in sorted(table, key=len, reverse=True)))

    def replace(text: str) -> str:
        return pattern.sub(lambda match: table[match.group()], text)

    return replace


@dataclass
class _Kind:
    """One kind's first deployment and its objects, then the kind's template once checked
    (``None``: renamed from nothing, its deployments are rendered afresh)."""

    first_name: str
    objects: list[Json]
    spec: Json
    template: list[Json] | None = None
    checked: bool = False


def kind_of(spec: ModelDeploymentSpec) -> Json | None:
    """``spec`` as plain data with its name replaced by :data:`SENTINEL` in every string: equal
    for two deployments that differ by their names alone. ``None`` when the replacement cannot
    be undone exactly (the spec holds the sentinel already)."""
    dump = spec.model_dump(mode="json", exclude_unset=True)
    kind: Json = _renamed(dump, _replacer({spec.name: SENTINEL}))
    if not _identical(_renamed(kind, _replacer({SENTINEL: spec.name})), dump):
        return None
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
        objects: list[Json] = _renamed(kind.template, self._naming(spec.name))
        return objects

    def _fresh(self, spec: ModelDeploymentSpec) -> list[Json]:
        derived = {label: derive(spec.name) for label, derive in self.derived.items()}
        return self.render(spec, derived)

    def _sentinel_of(self, label: str) -> str:
        return f"{SENTINEL}-{label}"

    def _naming(self, name: str) -> Callable[[str], str]:
        """Renaming of a template for the deployment ``name``."""
        table = {SENTINEL: name}
        table.update(
            {self._sentinel_of(label): derive(name) for label, derive in self.derived.items()}
        )
        return _replacer(table)

    def _checked_template(
        self, kind: _Kind, spec_type: type[ModelDeploymentSpec]
    ) -> list[Json] | None:
        """The kind's template, if renaming it gives what rendering gives for the kind's first
        deployment and for the kind under :data:`SHORT_NAME`; ``None`` otherwise."""
        try:
            spec = spec_type.model_validate(kind.spec)
            short = spec_type.model_validate(_renamed(kind.spec, _replacer({SENTINEL: SHORT_NAME})))
        except ValidationError:
            # A string holding the name means something under it (an instance type).
            return None
        stand_ins = {label: self._sentinel_of(label) for label in self.derived}
        try:
            template = self.render(spec, stand_ins)
            renamed = [_renamed(template, self._naming(n)) for n in (kind.first_name, SHORT_NAME)]
            fresh = self._fresh(short)
        except Exception:
            # Whatever fails under another name than the first deployment's (a rule on the
            # name, a value the renaming does not reach into): the kind depends on its name
            # otherwise than by writing it.
            return None
        if _identical(renamed[0], kind.objects) and _identical(renamed[1], fresh):
            return template
        return None
