"""Collect every problem of a spec, then raise them together with their field paths.

Rules come in two kinds. A rule about one field is part of that field's type (an
``Annotated`` validator), so pydantic reports it beside every other field error. A rule that
reads several fields is a :class:`Rule` of the model, run by :func:`validate_with_rules` from a
wrap model validator: when some fields fail, the rules that read only fields that validated
still run, so one validation lists every problem of a spec.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ModelWrapValidatorHandler, TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

# The error type of every rule of the specs, so that callers can tell rules from parse errors.
RULE_ERROR_TYPE = "deployment_rule"

ModelT = TypeVar("ModelT", bound=BaseModel)


def rule_error(message: str) -> PydanticCustomError:
    """The error a field validator raises for a broken rule: ``message`` as pydantic's ``msg``.

    Unlike a ``ValueError``, it is reported without a ``Value error,`` prefix, like the
    problems of :class:`Problems`.
    """
    return PydanticCustomError(RULE_ERROR_TYPE, "{message}", {"message": message})


class Problems:
    """Accumulates rule violations so that one validation reports all of them at once.

    Each problem carries the field path it belongs to (``("limits", "max_model_len")``) and a
    message that says what would work. Raising a :class:`pydantic.ValidationError` from a
    validator lets pydantic prefix the path of the enclosing object, so a deployment inside a
    platform reports ``deployments.2.tensor_parallel_size``.
    """

    def __init__(self, title: str) -> None:
        self._title = title
        self._errors: list[InitErrorDetails] = []

    def add(self, loc: Sequence[str | int], message: str, value: Any = None) -> None:
        self._errors.append(InitErrorDetails(type=rule_error(message), loc=tuple(loc), input=value))

    def add_errors(self, error: ValidationError) -> None:
        """Keep pydantic's own errors (a field that failed) beside the rule problems."""
        for detail in error.errors(include_url=False):
            self._errors.append(
                InitErrorDetails(
                    type=PydanticCustomError(
                        detail["type"], "{message}", {"message": detail["msg"]}
                    ),
                    loc=detail["loc"],
                    input=detail["input"],
                )
            )

    def __len__(self) -> int:
        return len(self._errors)

    def raise_if_any(self) -> None:
        if self._errors:
            raise ValidationError.from_exception_data(self._title, self._errors)


@dataclass(frozen=True)
class Rule(Generic[ModelT]):
    """A rule across fields of a model: ``check`` adds its problems; it reads only ``reads``.

    ``reads`` names every field the check touches, properties included (``spec.instance``
    reads ``instance_type``), as a field (``limits``) or a field of a nested model
    (``limits.max_model_len``): the rule runs only when all of them validated.
    """

    reads: frozenset[str]
    check: Callable[[ModelT, Problems], None]


def validate_with_rules(
    cls: type[ModelT],
    data: Any,
    handler: ModelWrapValidatorHandler[ModelT],
    rules: Sequence[Rule[ModelT]],
) -> ModelT:
    """Validate ``data`` as ``cls`` (through ``handler``), then apply ``rules``.

    For use in a ``mode="wrap"`` model validator. When every field validates, every rule runs
    on the model. When some fail, pydantic's errors are kept, the fields that did validate are
    validated again on their own (inside nested models too), and the rules that read only those
    run on a partial model, so their problems are reported together with the field errors.
    """
    problems = Problems(cls.__name__)
    try:
        model = handler(data)
    except ValidationError as error:
        failed = [detail["loc"] for detail in error.errors()]
        if not isinstance(data, Mapping) or not all(failed):
            raise
        problems.add_errors(error)
        model, valid = _partial_model(cls, data, failed)
    else:
        valid = set(cls.model_fields)
    for rule in rules:
        if all(_validated(path, valid) for path in rule.reads):
            rule.check(model, problems)
    problems.raise_if_any()
    return model


def _validated(path: str, valid: set[str]) -> bool:
    """Whether ``path`` (``limits.max_model_len``), or a model holding it, validated."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in valid for i in range(1, len(parts) + 1))


def _partial_model(
    cls: type[ModelT], data: Mapping[Any, Any], failed: Sequence[tuple[int | str, ...]]
) -> tuple[ModelT, set[str]]:
    """A ``cls`` holding the fields that validate, and the paths of those fields.

    ``failed`` are the locations of the errors. Each other field is validated on its own; a
    nested model with errors in some of its fields is built the same way, so that its valid
    fields can still be read. A field that failed is left out rather than set to its default,
    so that a rule reading it by mistake fails loudly in the tests instead of checking a value
    the user never gave.
    """
    errors_of: dict[str, list[tuple[int | str, ...]]] = {}
    for loc in failed:
        errors_of.setdefault(str(loc[0]), []).append(loc[1:])
    values: dict[str, Any] = {}
    valid: set[str] = set()
    for name, field in cls.model_fields.items():
        nested = _model_class(field.annotation)
        if name not in errors_of:
            if name in data:
                try:
                    values[name] = _field_adapter(cls, name).validate_python(data[name])
                except ValidationError:
                    continue
            valid.add(name)
        elif nested is not None and isinstance(data.get(name), Mapping) and all(errors_of[name]):
            values[name], inner = _partial_model(nested, data[name], errors_of[name])
            valid |= {f"{name}.{path}" for path in inner}
    model = cls.model_construct(_fields_set=set(values), **values)
    for name in cls.model_fields.keys() - values.keys() - valid:
        model.__dict__.pop(name, None)
    return model, valid


def _model_class(annotation: Any) -> type[BaseModel] | None:
    """The model class of a field typed as a model, or as an optional one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, UnionType):
        models = [
            a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if len(models) == 1:
            return models[0]
    return None


@functools.cache
def _field_adapter(cls: type[BaseModel], name: str) -> TypeAdapter[Any]:
    field = cls.model_fields[name]
    # The field's type with its constraints and validators, as pydantic reads an annotation.
    annotated: Any = Annotated[field.annotation, field]
    return TypeAdapter(annotated)
