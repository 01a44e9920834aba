"""Reading the config file: YAML with line numbers, schema validation, then compilation.

The YAML is composed into nodes first (each knows its line), checked for duplicate keys, then
constructed and validated with pydantic; every schema or semantic problem is mapped back to the
line of the field it names. All problems are collected and raised together as a
:class:`ConfigError`, rendered one per line as ``FILE:LINE: FIELD: MESSAGE``.

The node tree lives only while a file is loaded: at 10,000 tenants it is several times the size
of the compiled policy, so a loaded config keeps no trace of it.
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tenants.config import (
    Policy,
    PolicyError,
    PolicyProblem,
    TenantgateConfig,
    compile_policy,
    field_path,
)

logger = logging.getLogger(__name__)

_MERGE_TAG: Final = "tag:yaml.org,2002:merge"
_INDEX_RE: Final = re.compile(r"\[(\d+)\]")
_PYDANTIC_PREFIXES: Final = ("Value error, ", "Assertion failed, ")
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem in a config file: where (file, line, field path) and what."""

    file: str
    line: int  # 1-based; 0 when the problem is not about one line (unreadable file)
    field: str
    message: str
    column: int = 0  # 1-based; 0 when not known (set for YAML syntax errors)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        where += f":{self.column}" if self.line and self.column else ""
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class ConfigError(ValueError):
    """The config file is not usable; ``problems`` lists the problems found, in line order.

    When a load was told to report at most N problems, ``problems`` holds the first N found
    and ``omitted`` counts the others.
    """

    def __init__(self, problems: Iterable[ConfigProblem], *, omitted: int = 0) -> None:
        # The message breaks ties, so that several problems of one field print in a fixed order.
        self.problems = tuple(
            sorted(set(problems), key=lambda p: (p.file, p.line, p.field, p.message))
        )
        self.omitted = omitted
        lines = [str(problem) for problem in self.problems]
        if omitted:
            lines.append(f"... and {omitted} more")
        super().__init__("\n".join(lines))


class SourceMap:
    """Maps field paths of a YAML document to line numbers, from its composed nodes."""

    def __init__(self, root: yaml.Node | None) -> None:
        self._root = root

    def line_of_parts(self, parts: Sequence[str | int]) -> tuple[int, list[str | int]]:
        """The line of the deepest node ``parts`` reaches, and the parts that matched nodes."""
        node = self._root
        line = node.start_mark.line + 1 if node is not None else 1
        matched: list[str | int] = []
        for part in parts:
            child = _child(node, part)
            if child is None:
                continue  # a pydantic union or validator tag, or a missing field
            node, line = child
            matched.append(part)
        return line, matched

    def line_of_path(self, path: str) -> int:
        """The line of a dotted field path (``tenants.team-a.quota.guaranteed[nvidia.com/gpu]``).

        Keys may contain dots: at each mapping the longest key that fits is taken.
        """
        node = self._root
        line = node.start_mark.line + 1 if node is not None else 1
        rest = path
        while rest and node is not None:
            if rest.startswith("."):
                rest = rest[1:]
            found: tuple[int, yaml.Node, int] | None = None
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if not isinstance(key_node, yaml.ScalarNode):
                        continue
                    key = str(key_node.value)
                    if rest.startswith(f"[{key}]"):
                        length = len(key) + 2
                    elif rest.startswith(key) and rest[len(key) : len(key) + 1] in ("", ".", "["):
                        length = len(key)
                    else:
                        continue
                    if found is None or length > found[0]:
                        found = (length, value_node, key_node.start_mark.line + 1)
            elif isinstance(node, yaml.SequenceNode):
                index = _INDEX_RE.match(rest)
                if index is not None and int(index.group(1)) < len(node.value):
                    item = node.value[int(index.group(1))]
                    found = (index.end(), item, item.start_mark.line + 1)
            if found is None:
                break
            rest = rest[found[0] :]
            node, line = found[1], found[2]
        return line


def _child(node: yaml.Node | None, part: str | int) -> tuple[yaml.Node, int] | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                return value_node, key_node.start_mark.line + 1
    elif (
        isinstance(node, yaml.SequenceNode)
        and isinstance(part, int)
        and 0 <= part < len(node.value)
    ):
        item = node.value[part]
        return item, item.start_mark.line + 1
    return None


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A config file read, validated and compiled (without its YAML nodes: see the module).

    ``config`` is for tools that read the validated model; the policy does not keep it, so a
    server that holds only ``policy`` frees it (most of a large config's memory).
    """

    file: str
    config: TenantgateConfig
    policy: Policy


# --------------------------------------------------------------------------- stages


def parse_yaml(text: str, *, filename: str) -> tuple[Any, SourceMap]:
    """Compose and construct one YAML document; duplicate keys and syntax errors are problems."""
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise ConfigError([_syntax_problem(exc, filename)]) from exc
        except yaml.YAMLError as exc:
            raise ConfigError([ConfigProblem(filename, 0, "", str(exc))]) from exc
        if root is None:
            raise ConfigError([ConfigProblem(filename, 1, "", "the config file is empty")])
        duplicates = list(_duplicate_keys(root, filename))
        if duplicates:
            raise ConfigError(duplicates)
        try:
            data = loader.construct_document(root)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 0
            raise ConfigError([ConfigProblem(filename, line, "", str(exc))]) from exc
    finally:
        loader.dispose()
    return data, SourceMap(root)


# Errors found only where a construct should have ended: a key without ':', an unclosed
# bracket or quote. The parser notices on a later line; the mistake is where it began.
_UNTERMINATED = ("while scanning a simple key", "while parsing a flow", "while scanning a quoted")


def _syntax_problem(exc: yaml.MarkedYAMLError, filename: str) -> ConfigProblem:
    context, problem = exc.context or "", exc.problem or ""
    mark = exc.problem_mark or exc.context_mark
    noticed = ""
    if exc.context_mark is not None and context.startswith(_UNTERMINATED):
        if mark is not None and mark.line != exc.context_mark.line:
            noticed = f" (noticed at line {mark.line + 1}, column {mark.column + 1})"
        mark = exc.context_mark
    message = ", ".join(part for part in (context, problem) if part) or str(exc)
    if mark is None:
        return ConfigProblem(filename, 0, "", message)
    return ConfigProblem(filename, mark.line + 1, "", message + noticed, column=mark.column + 1)


def _duplicate_keys(root: yaml.Node, filename: str) -> Iterable[ConfigProblem]:
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue  # an alias of a node already checked
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line: dict[str, int] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                    key = str(key_node.value)
                    line = key_node.start_mark.line + 1
                    if key in first_line:
                        yield ConfigProblem(
                            filename,
                            line,
                            field_path(*path, key),
                            f'duplicate key "{key}" (first at line {first_line[key]})',
                        )
                    else:
                        first_line[key] = line
                    stack.append((value_node, (*path, key)))
                else:
                    stack.append((value_node, path))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, index)) for index, item in enumerate(node.value))


def validate(data: Any, source: SourceMap, *, filename: str) -> TenantgateConfig:
    """Validate the constructed document against the schema; problems carry their line."""
    try:
        return TenantgateConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_schema_problems(exc, source, filename)) from exc


def _schema_problems(
    exc: ValidationError, source: SourceMap, filename: str, *, limit: int | None = None
) -> list[ConfigProblem]:
    problems = []
    # Finding a line scans the nodes: only for the problems that will be reported.
    for error in exc.errors(include_url=False)[:limit]:
        loc = tuple(error["loc"])
        line, matched = source.line_of_parts(loc)
        kind = error["type"]
        message = str(error["msg"])
        for prefix in _PYDANTIC_PREFIXES:
            message = message.removeprefix(prefix)
        if kind == "missing" and loc:
            matched.append(loc[-1])
            message = "required field is missing"
        elif kind == "extra_forbidden":
            message = "unknown field"
        problems.append(ConfigProblem(filename, line, field_path(*matched), message))
    return problems


def compile_config(config: TenantgateConfig, source: SourceMap, *, filename: str) -> Policy:
    """Compile the policy; semantic problems carry the line of the field they name."""
    try:
        return compile_policy(config)
    except PolicyError as exc:
        raise ConfigError(locate(exc.problems, source, filename=filename)) from exc


def locate(
    problems: Iterable[PolicyProblem], source: SourceMap, *, filename: str
) -> list[ConfigProblem]:
    """Attach file and line to problems that carry only a field path."""
    return [
        ConfigProblem(filename, source.line_of_path(p.path), p.path, p.message) for p in problems
    ]


# --------------------------------------------------------------------------- entry points


def read_text(path: str | Path, *, max_bytes: int | None = None) -> str:
    """The file's text; an unreadable file, or one over ``max_bytes``, is a :class:`ConfigError`
    naming it."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
        if max_bytes is not None and len(data) > max_bytes:
            raise ConfigError(
                [ConfigProblem(str(path), 0, "", f"larger than the limit of {max_bytes} bytes")]
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([ConfigProblem(str(path), 0, "", f"cannot read: {reason}")]) from exc


def _detached(data: Any) -> Any:
    """A deep copy of constructed YAML data sharing no object with the node tree.

    The constructed values are the nodes' own strings; kept by the config, they would pin
    the memory pages of the whole (much larger) tree after it is freed. A pickle round trip
    copies every value, keeps YAML's types (dates, bytes, sets, non-string keys) and aliases.
    """
    # The bytes never leave this line: they are the ones pickle.dumps just produced.
    return pickle.loads(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))  # noqa: S301


def load_text(
    text: str, *, filename: str = "<config>", max_problems: int | None = None
) -> LoadedConfig:
    """Parse, validate and compile config text; :class:`ConfigError` lists every problem (the
    first ``max_problems``, when given, and how many more).

    The node tree is dropped right after parsing; only a config with problems is parsed
    again, to give each problem its line.
    """
    data = _detached(parse_yaml(text, filename=filename)[0])
    try:
        config = TenantgateConfig.model_validate(data)
    except ValidationError as exc:
        _, source = parse_yaml(text, filename=filename)
        found = _schema_problems(exc, source, filename, limit=max_problems)
        raise ConfigError(found, omitted=exc.error_count() - len(found)) from exc
    del data
    try:
        policy = compile_policy(config)
    except PolicyError as exc:
        _, source = parse_yaml(text, filename=filename)
        shown = exc.problems[:max_problems]
        omitted = len(exc.problems) - len(shown)
        raise ConfigError(locate(shown, source, filename=filename), omitted=omitted) from exc
    return LoadedConfig(filename, config, policy)


def load(
    path: str | Path, *, max_bytes: int | None = None, max_problems: int | None = None
) -> LoadedConfig:
    return load_text(
        read_text(path, max_bytes=max_bytes), filename=str(path), max_problems=max_problems
    )


def load_config(path: str | Path) -> TenantgateConfig:
    """The validated config of ``path``; raises :class:`ConfigError` (file, line, field)."""
    return load(path).config


def load_policy(path: str | Path) -> Policy:
    """The compiled policy of ``path``; raises :class:`ConfigError` (file, line, field)."""
    return load(path).policy
