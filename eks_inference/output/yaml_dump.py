"""The manifests' YAML: documents as one stream, the same text for the same objects.

:func:`dump_yaml` writes the text straight from the data
(:func:`~eks_inference.output.yaml_text.block_yaml`) where it can, and with libyaml's emitter
otherwise; :func:`libyaml_yaml` is the reference the fast writer's text is held to, byte for
byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from eks_inference.output.yaml_text import WIDTH, block_yaml, scalar_tag

# libyaml's emitter when PyYAML was built with it (its wheels are): the same text, byte for
# byte, as the pure-Python emitter's, in a seventh of the time.
if TYPE_CHECKING:
    _SafeDumper = yaml.SafeDumper
else:
    _SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"


class _ReadableDumper(_SafeDumper):
    """YAML for reviewers: block style, multi-line strings as literal blocks, no anchors or
    aliases.

    Dicts, lists and strings (nearly every node of a Kubernetes object) become the very nodes
    the generic representer would build with :func:`dump_yaml`'s settings (keys in the order
    given, block style), without its dispatch; scalar tags are resolved once per text. Every
    other value goes through the generic representer.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def represent_data(self, data: Any) -> yaml.Node:
        kind = type(data)
        if kind is dict:
            pairs = [(self.represent_data(k), self.represent_data(v)) for k, v in data.items()]
            return yaml.MappingNode(_MAP_TAG, pairs, flow_style=False)
        if kind is list:
            items = [self.represent_data(item) for item in data]
            return yaml.SequenceNode(_SEQ_TAG, items, flow_style=False)
        if kind is str:
            return yaml.ScalarNode(_STR_TAG, data, style="|" if "\n" in data else None)
        node: yaml.Node = super().represent_data(data)
        return node

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            return scalar_tag(value, implicit)
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag


def dump_yaml(documents: list[Any]) -> str:
    """Documents as one YAML stream, keys in the order given, deterministic for equal input.

    The text is :func:`libyaml_yaml`'s, byte for byte: written straight from the data by
    :func:`~eks_inference.output.yaml_text.block_yaml` where it can, by libyaml otherwise.
    """
    text = block_yaml(documents)
    return libyaml_yaml(documents) if text is None else text


def libyaml_yaml(documents: list[Any]) -> str:
    """Documents as one YAML stream written by libyaml's emitter with :class:`_ReadableDumper`
    (block style, width 100): the reference the fast writer's text is held to."""
    return yaml.dump_all(
        documents, Dumper=_ReadableDumper, sort_keys=False, default_flow_style=False, width=WIDTH
    )
