"""Collect every problem of a spec, then raise them together with their field paths.

Rules come in two kinds. A rule about one field is part of that field's type (an
``Annotated`` validator), so pydantic reports it beside every other field error. A rule that
reads several fields is a :class:`Rule` of the model, run by :func:`validate_with_rules` from a
wrap model validator: when some fields fail, the rules that read only fields that validated
still run, so one validation lists every problem of a spec. A rule never fails on what the
user got wrong: one that raises on a spec with a field that failed, or after an earlier rule
refused a value it reads (a degree the instance's topology lacks, then sized), adds nothing
more, since what it would say depends on a value to fix first.

Errors are also made readable here, once for every model: an unknown field names the field it
most resembles ("did you mean tensor_parallel_size?") and the errors that only follow from the
misspelling (the real field missing, or a rule reading its default) are left out; a mapping that
shares no field with the model is one error saying so, instead of one per key; and a message
echoes at most :data:`MAX_ECHOED_CHARACTERS` of any input it quotes, so that a 5,000-character
name cannot make a 5,000-character error.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ModelWrapValidatorHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

# The error type of every rule of the specs, so that callers can tell rules from parse errors.
RULE_ERROR_TYPE = "deployment_rule"
# A field the model does not have, with the field it most resembles when one is close.
UNKNOWN_FIELD_ERROR_TYPE = "unknown_field"
# A mapping none of whose keys is, or resembles, a field of the model: another kind of file.
UNRELATED_MAPPING_ERROR_TYPE = "unrelated_mapping"
# Quoted input beyond this many characters is cut: enough to recognise a name or a path (AWS
# names are at most 63), far less than a pasted document.
MAX_ECHOED_CHARACTERS = 40
# A bracketed list of more items than this is shown by its first ones and its length: the
# deployments sharing a pool, say, of which there may be hundreds. Lists of choices (block
# sizes, degrees, instance types) are shorter, and kept whole.
MAX_ECHOED_ITEMS = 20
# The context key under which a field validated on its own finds those validated before it.
_PRIOR_FIELDS = "eks_inference.prior_fields"
# How alike a key and a field name must be to suggest one for the other (difflib's ratio):
# ``tensor_paralel_size`` and ``maxReplicas`` match their fields; ``replicas`` matches none.
_SUGGESTION_CUTOFF = 0.75
# Unknown keys beyond this many get no suggestion: a few misspellings are worth a search each,
# thousands of keys are some other file, and comparing each would take seconds.
_MAX_SEARCHED_KEYS = 50
# The errors whose messages this library writes (rules, and ValueErrors of validators).
_ECHOING_ERROR_TYPES = frozenset({RULE_ERROR_TYPE, "value_error", "assertion_error"})
# Quoted text, as repr() quotes it; matched left to right, so that each pair of quotes is one.
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
# A list as repr() writes it, with no list inside.
_LISTED = re.compile(r"\[([^\[\]]*)\]")

# Errors beyond this many are counted in a one-line summary rather than listed.
MAX_LISTED_ERRORS = 8
# A key quoted in a one-line summary is cut to this many characters: the keys come from a file.
_MAX_QUOTED_KEY = 200

ModelT = TypeVar("ModelT", bound=BaseModel)


def _printable_key(key: str) -> str:
    """A key from a file made fit for one line: whitespace runs as one space, other
    characters ``repr()`` escapes shown escaped, cut to :data:`_MAX_QUOTED_KEY`."""
    line = " ".join(key.split())
    if not line.isprintable():
        line = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in line)
    return line if len(line) <= _MAX_QUOTED_KEY else f"{line[: _MAX_QUOTED_KEY - 3]}..."


def one_line(error: ValidationError, quote: Callable[[str], str] = _printable_key) -> str:
    """pydantic's errors on one line, each field path first: ``loc: message; loc: message
    (+N more)``. ``quote`` makes each key of a path fit to print (the CLI's also redacts)."""
    parts = []
    for detail in error.errors(include_url=False)[:MAX_LISTED_ERRORS]:
        loc = ".".join(quote(str(p)) for p in detail["loc"])
        message = detail["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {message}" if loc else message)
    more = error.error_count() - len(parts)
    if more > 0:
        parts.append(f"(+{more} more)")
    return "; ".join(parts)


class SpecError(ValidationError):
    """A spec that breaks the rules, as its constructor raises it: ``str()`` is one line, each
    problem's field path first (``deployments.0.tensor_parallel_size: ...``), the line
    ``eks-inference plan`` prints. A pydantic ``ValidationError`` (and so a ``ValueError``)
    with every error still in ``errors()``.
    """

    def __str__(self) -> str:
        return one_line(self)

    @classmethod
    def of(cls, error: ValidationError) -> SpecError:
        """``error`` as a :class:`SpecError`, its errors' types, paths, messages and inputs
        kept."""
        return cls.from_exception_data(
            error.title,
            [
                InitErrorDetails(
                    type=PydanticCustomError(
                        detail["type"], "{message}", {"message": detail["msg"]}
                    ),
                    loc=detail["loc"],
                    input=detail["input"],
                )
                for detail in error.errors(include_url=False)
            ],
        )


class SpecModel(BaseModel):
    """A spec users build themselves: constructing one that breaks the rules raises
    :class:`SpecError`, whose text is the one line the CLI and the reference app print,
    instead of pydantic's multi-line report. (``model_validate`` is pydantic's own, and
    raises its ``ValidationError``.)

    Only the outermost model raises it: nested in another spec, a model's errors are part of
    its parent's, located under the parent's field.
    """

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise SpecError.of(error) from None

    # Marks the constructor as pydantic's own (as pydantic's RootModel does), so that
    # validating a spec nested in another builds it without calling it: only the outermost
    # spec raises SpecError.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


def shorten(message: str) -> str:
    """``message`` with quoted inputs cut to :data:`MAX_ECHOED_CHARACTERS` and listed ones to
    :data:`MAX_ECHOED_ITEMS`; the rest of it (what is wrong, what would work) is kept whole."""

    def cut(match: re.Match[str]) -> str:
        quoted = match[1] if match[1] is not None else match[2]
        if len(quoted) <= MAX_ECHOED_CHARACTERS:
            return match[0]
        return f"'{quoted[:MAX_ECHOED_CHARACTERS]}...' ({len(quoted)} characters)"

    def first_items(match: re.Match[str]) -> str:
        items = match[1].split(", ")
        if len(items) <= MAX_ECHOED_ITEMS:
            return match[0]
        return f"[{', '.join(items[: MAX_ECHOED_ITEMS // 2])}, ... ({len(items)} in all)]"

    return _LISTED.sub(first_items, _QUOTED.sub(cut, message))


def _shown(detail: ErrorDetails) -> str:
    """The message of ``detail``, shortened where it may quote an input: pydantic's own
    messages never do (they quote patterns and choices, which are kept whole), the messages of
    this library's validators may."""
    if detail["type"] in _ECHOING_ERROR_TYPES:
        return shorten(detail["msg"])
    return detail["msg"]


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
        self._errors.append(
            InitErrorDetails(type=rule_error(shorten(message)), loc=tuple(loc), input=value)
        )

    def add_errors(self, error: ValidationError) -> None:
        """Keep pydantic's own errors (a field that failed) beside the rule problems."""
        self.add_details(error.errors(include_url=False))

    def add_details(self, details: Sequence[ErrorDetails]) -> None:
        """Keep errors as pydantic reports them (type, location, message, input)."""
        for detail in details:
            self._errors.append(
                InitErrorDetails(
                    type=PydanticCustomError(
                        detail["type"], "{message}", {"message": _shown(detail)}
                    ),
                    loc=detail["loc"],
                    input=detail["input"],
                )
            )

    def __len__(self) -> int:
        return len(self._errors)

    def refused(self, start: int = 0) -> list[tuple[str, ...]]:
        """The fields whose values the problems from the ``start``-th on refuse: those added
        with the value (a problem that sums up a whole, such as a quota, names none)."""
        return [
            tuple(map(str, error["loc"]))
            for error in self._errors[start:]
            if error["loc"] and error["input"] is not None
        ]

    def raise_if_any(self, error: type[ValidationError] = ValidationError) -> None:
        """Raise the problems together, as ``error`` (a :class:`SpecError` where a user's own
        call is refused), when there are any."""
        if self._errors:
            raise error.from_exception_data(self._title, self._errors)


@dataclass(frozen=True)
class Rule(Generic[ModelT]):
    """A rule across fields of a model: ``check`` adds its problems; it reads only ``reads``.

    ``reads`` names every field the check touches, properties included (``spec.instance``
    reads ``instance_type``), as a field (``limits``) or a field of a nested model
    (``limits.max_model_len``): the rule runs only when all of them validated.
    """

    reads: frozenset[str]
    check: Callable[[ModelT, Problems], None]


class RuleBook(Generic[ModelT]):
    """The cross-field rules of a model, written by the module that holds them.

    A model validates with the rules of its book (:meth:`of`), and the rules' module writes
    them (:meth:`write`) once, when the package holding both is imported: the rules read the
    model and the modules their checks need, while the model's module imports none of them.
    """

    def __init__(self, model_name: str) -> None:
        self._model_name = model_name
        self._rules_of: Callable[[ModelT], Sequence[Rule[ModelT]]] | None = None

    def write(self, rules_of: Callable[[ModelT], Sequence[Rule[ModelT]]]) -> None:
        """Give the book its rules: ``rules_of`` returns those that apply to a (possibly
        partial) model. Written once."""
        if self._rules_of is not None:
            raise ValueError(f"the rules of {self._model_name} are written already")
        self._rules_of = rules_of

    def of(self, model: ModelT) -> Sequence[Rule[ModelT]]:
        """The rules that apply to ``model``."""
        if self._rules_of is None:
            raise RuntimeError(
                f"the rules of {self._model_name} are not written: import its package, which "
                "writes them, before validating one"
            )
        return self._rules_of(model)


def validate_with_rules(
    cls: type[ModelT],
    data: Any,
    handler: ModelWrapValidatorHandler[ModelT],
    rules: Sequence[Rule[ModelT]] | Callable[[ModelT], Sequence[Rule[ModelT]]],
) -> ModelT:
    """Validate ``data`` as ``cls`` (through ``handler``), then apply ``rules``.

    ``rules`` may also be a function of the (possibly partial) model that returns them, for
    rules that depend on a field's value, such as those of the engine a spec names.

    For use in a ``mode="wrap"`` model validator. A mapping with no field of ``cls`` is one
    error; unknown fields are explained as the module docstring says. When every field
    validates, every rule runs on the model. When some fail, pydantic's errors are kept, the
    fields that did validate are validated again on their own (inside nested models too), and
    the rules that read only those run on a partial model, so their problems are reported
    together with the field errors.

    Rules run in order. One that raises stops there, adding nothing more, when the spec has a
    field that failed (a rule reading a field the partial model leaves out, whatever its
    ``reads`` say, or a value that only a skipped rule would have refused) or when an earlier
    rule refused a value it reads (a problem added with the value, :meth:`Problems.refused`):
    it sized or compared a value already known to be wrong. On a spec whose fields and earlier
    rules all passed, an exception is a bug of the rule, and raised.
    """
    problems = Problems(cls.__name__)
    if isinstance(data, Mapping):
        unrelated = _unrelated_mapping(cls, data)
        if unrelated is not None:
            problems.add_details([unrelated])
            problems.raise_if_any()
    try:
        model = handler(data)
    except ValidationError as error:
        details, misspelled = _explain_unknown_fields(cls, data, error.errors(include_url=False))
        failed = [detail["loc"] for detail in details] + misspelled
        problems.add_details(details)
        if not isinstance(data, Mapping) or not all(failed):
            problems.raise_if_any()
        model, valid = _partial_model(cls, data, failed)
    else:
        valid = set(cls.model_fields)
    partial = len(problems) > 0
    refused: list[tuple[str, ...]] = []
    for rule in rules(model) if callable(rules) else rules:
        if not all(_validated(path, valid) for path in rule.reads):
            continue
        start = len(problems)
        try:
            rule.check(model, problems)
        except Exception:
            # What the rule would say follows from a value the user must fix first.
            if not partial and not any(_within(p, loc) for p in rule.reads for loc in refused):
                raise
        refused += problems.refused(start)
    problems.raise_if_any()
    return model


def validate_explained(cls: type[ModelT], data: Any) -> ModelT:
    """``data`` validated as ``cls``, unknown fields explained as in every spec (the field a
    misspelt key resembles suggested): for a model validated by a validator of another (an
    engine's options inside a deployment), whose errors pydantic then reports under the
    field's path."""
    try:
        return cls.model_validate(data)
    except ValidationError as error:
        details, _ = _explain_unknown_fields(cls, data, error.errors(include_url=False))
        problems = Problems(cls.__name__)
        problems.add_details(details)
        problems.raise_if_any()
        raise


def _within(path: str, loc: tuple[str, ...]) -> bool:
    """Whether the field ``path`` (``limits.max_model_len``) is the field at ``loc`` or lies
    within it (a rule reading all of ``deployments`` still runs when one deployment's name
    was refused)."""
    parts = tuple(path.split("."))
    return parts[: len(loc)] == loc


def _field_names(cls: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in cls.model_fields.items()]


def required_fields(cls: type[BaseModel]) -> list[str]:
    """The fields of ``cls`` that have no default, as they are written in a spec."""
    return [field.alias or name for name, field in cls.model_fields.items() if field.is_required()]


def _unrelated_mapping(cls: type[BaseModel], data: Mapping[Any, Any]) -> ErrorDetails | None:
    """One error for a mapping that is not this model at all (no key is or resembles a field).

    Without it, another kind of file (a Kubernetes manifest, a long ``key: value`` listing)
    would be reported key by key, as thousands of unknown fields.
    """
    names = _field_names(cls)
    keys = [key for key in data if isinstance(key, str)]
    if not data or set(keys) & set(names):
        return None
    # Resemblance is looked for among the first keys only: a misspelt spec has its fields near
    # the top, and a listing of thousands of keys would take seconds to compare.
    if any(
        difflib.get_close_matches(key, names, 1, _SUGGESTION_CUTOFF)
        for key in keys[:_MAX_SEARCHED_KEYS]
    ):
        return None
    shown = ", ".join(repr(str(key))[:30] for key in list(data)[:3])
    more = ", ..." if len(data) > 3 else ""
    required = required_fields(cls)
    expected = f"it needs {', '.join(required)}" if required else f"its fields: {', '.join(names)}"
    message = f"none of its {len(data)} keys ({shown}{more}) is a {cls.__name__} field; {expected}"
    return ErrorDetails(type=UNRELATED_MAPPING_ERROR_TYPE, loc=(), msg=message, input=None)


def _explain_unknown_fields(
    cls: type[BaseModel], data: Any, details: list[ErrorDetails]
) -> tuple[list[ErrorDetails], list[tuple[int | str, ...]]]:
    """``details`` with each unknown field told as such, and the locations of the fields meant.

    An unknown key that resembles a field the data does not give is taken for a misspelling of
    it: the message suggests the field, and the errors at that field (missing, or a rule that
    read its default) are dropped, since they only follow from the misspelling. The fields meant
    are returned so that the cross-field rules do not read them either.
    """
    meant: list[tuple[int | str, ...]] = []
    explained: list[ErrorDetails] = []
    searched = 0
    for detail in details:
        loc = detail["loc"]
        if detail["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
            explained.append(detail)
            continue
        model = _model_at(cls, loc[:-1]) if searched < _MAX_SEARCHED_KEYS else None
        searched += 1
        close = [] if model is None else _misspelt(loc[-1], model, _data_at(data, loc[:-1]))
        message = "unknown field"
        if close:
            message += f"; did you mean {close[0]}?"
            meant.append((*loc[:-1], close[0]))
        explained.append(
            ErrorDetails(type=UNKNOWN_FIELD_ERROR_TYPE, loc=loc, msg=message, input=detail["input"])
        )
    kept = [detail for detail in explained if not _follows_from(detail["loc"], meant)]
    return kept, meant


def _misspelt(key: str, model: type[BaseModel], given: Any) -> list[str]:
    """The fields of ``model`` that ``key`` resembles and that ``given`` does not already set."""
    close = difflib.get_close_matches(key, _field_names(model), 3, _SUGGESTION_CUTOFF)
    return [name for name in close if not (isinstance(given, Mapping) and name in given)]


def _follows_from(loc: tuple[int | str, ...], meant: list[tuple[int | str, ...]]) -> bool:
    """Whether an error at ``loc`` is about a field meant by a misspelled key (or inside it)."""
    return any(loc[: len(field)] == field for field in meant)


def _model_at(cls: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class of the object at ``loc`` inside a ``cls``, where the path leads to one.

    Integer steps index a sequence of models (``deployments.2``) and need no lookup.
    """
    model: type[BaseModel] | None = cls
    for step in loc:
        if isinstance(step, int):
            continue
        if model is None or step not in model.model_fields:
            return None
        model = _model_class(model.model_fields[step].annotation, within_containers=True)
    return model


def _data_at(data: Any, loc: Sequence[int | str]) -> Any:
    for step in loc:
        try:
            data = data[step]
        except (KeyError, IndexError, TypeError):
            return None
    return data


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
    so that a rule reading it stops (:func:`validate_with_rules` drops the rest of it) instead
    of checking a value the user never gave.
    """
    errors_of: dict[str, list[tuple[int | str, ...]]] = {}
    for loc in failed:
        errors_of.setdefault(str(loc[0]), []).append(loc[1:])
    values: dict[str, Any] = {}
    valid: set[str] = set()
    for name, field in cls.model_fields.items():
        nested = _model_class(field.annotation)
        if name not in errors_of:
            if name in data or field.validate_default:
                given = data[name] if name in data else field.get_default(call_default_factory=True)
                try:
                    values[name] = _field_adapter(cls, name).validate_python(
                        given, context={_PRIOR_FIELDS: dict(values)}
                    )
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


def _model_class(annotation: Any, within_containers: bool = False) -> type[BaseModel] | None:
    """The model class of a field typed as a model, or as an optional one.

    With ``within_containers``, also the model of a sequence of models (``tuple[NodePool, ...]``).
    """
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        models = [
            a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if len(models) == 1:
            return models[0]
    if within_containers and origin in (tuple, list):
        args = get_args(annotation)
        return _model_class(args[0], within_containers) if args else None
    return None


def prior_fields(info: ValidationInfo) -> Mapping[str, Any]:
    """The fields validated before the one ``info`` is of, for a validator that depends on
    them: the model's, or, for a field validated on its own (in a partial model, see
    :func:`validate_with_rules`), those that validated before it."""
    if info.data:
        return info.data
    context = info.context
    prior = context.get(_PRIOR_FIELDS) if isinstance(context, Mapping) else None
    return prior if isinstance(prior, Mapping) else {}


@functools.cache
def _field_adapter(cls: type[BaseModel], name: str) -> TypeAdapter[Any]:
    # The field's type with its constraints and validators, as pydantic reads an annotation;
    # whether its default is validated means nothing outside a model, and pydantic warns of it.
    field = copy.copy(cls.model_fields[name])
    field.validate_default = None
    annotated: Any = Annotated[field.annotation, field]
    return TypeAdapter(annotated)
