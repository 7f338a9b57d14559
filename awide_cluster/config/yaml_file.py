"""PyYAML, bounded: the parsing half of ``config.common.read_yaml`` (which reads the file and
decodes it; see its module doc for the limits). Apart so that a program given its config as
data (the gateway library's ``parse_config``) never imports PyYAML."""

from __future__ import annotations

from typing import Any

import yaml

from awide_cluster.config.common import MAX_ALIASES, MAX_DEPTH, MAX_NODES, ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """A limit of the loader, raised while parsing or constructing (with its mark)."""


class _NoDuplicates(yaml.constructor.SafeConstructor):
    """PyYAML's safe constructor that refuses a key given twice in one mapping (PyYAML keeps
    the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue                    # unhashable keys: PyYAML's own error; merges
            key = self.construct_object(key_node)
            if key in first:
                raise _Refused(problem=f"key {key_node.value!r} given twice (first on line "
                                       f"{first[key]}): each key once",
                               problem_mark=key_node.start_mark)
            first[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


class _PyLoader(_NoDuplicates, yaml.SafeLoader):
    pass


class _CLoader(_NoDuplicates, yaml.CSafeLoader):
    """libyaml's parser (several times faster than PyYAML's) with the same constructor."""


# libyaml when PyYAML was built with it (the wheels are), else PyYAML's own parser
_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = \
    _CLoader if yaml.__with_libyaml__ else _PyLoader


def _check_shape(text: str) -> None:
    """Refuse collections nested deeper than ``MAX_DEPTH``, more than ``MAX_ALIASES`` alias
    uses and more than ``MAX_NODES`` nodes, from the parser's events (iterative: composing a
    deep document recurses), before anything is built (building is the slow part)."""
    depth = aliases = nodes = 0
    for event in yaml.parse(text, Loader=_LOADER):
        mark: Any = event.start_mark
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise _Refused(problem=f"more than {MAX_NODES} values: not a config file",
                               problem_mark=mark)
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(problem=f"nested deeper than {MAX_DEPTH} levels",
                               problem_mark=mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _Refused(problem=f"more than {MAX_ALIASES} aliases (*name)",
                               problem_mark=mark)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def parse_text(name: str, text: str) -> Any:
    """The data of the YAML ``text`` of file ``name``; ConfigError naming the file (and the
    line) when it is not YAML, too deep, too large or holds a key twice."""
    try:
        _check_shape(text)
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        # libyaml marks an error at the end of a file without a final newline one line past it
        last = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
        where = f"line {min(mark.line + 1, last)}" if mark is not None else "-"
        if isinstance(e, yaml.reader.ReaderError):
            where = f"line {text.count(chr(10), 0, e.position) + 1}"
            char = e.character
            why = f"character #x{char:04x} is not allowed" if isinstance(char, int) \
                else "a character that is not allowed"
        else:
            why = str(getattr(e, "problem", None) or e)
        raise ConfigError(name, where, f"not valid YAML: {_one_line(why)}") from None
    except RecursionError:
        raise ConfigError(name, "-", "not valid YAML: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as e:    # e.g. a timestamp 2001-02-30
        raise ConfigError(name, "-", f"not valid YAML: a value cannot be read: "
                                     f"{_one_line(e)}") from None
