"""Reading a policy: YAML text -> :class:`~controller.policy.models.Policy`, with errors that name the source,
line, field and allowed values; :func:`load_policy` reads the file."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from controller.domain.text import one_line
from controller.errors import InvalidInput
from controller.policy.models import Policy
from controller.policy.space import Feasibility
from controller.simulator.perf import PerformanceModel


class PolicyError(InvalidInput):
    """A policy file failed to parse or validate. ``problems`` holds one line per error, each made safe to show on
    one line (:func:`~controller.domain.text.one_line`: a key or value of the tenant's text cannot drive a terminal
    or forge a line of an Event, a condition or a log). ``limit`` names the bound a refused document exceeded
    (``bytes``, ``nodes``, ``depth``, ``aliases``), empty for any other error."""

    def __init__(
        self, path: str, problems: Sequence[str], *, line: int | None = None, field: str = "", limit: str = ""
    ) -> None:
        safe = [one_line(problem) for problem in problems]
        super().__init__("\n".join(safe))
        self.source = f"{path}:{line}" if line else path
        self.field = one_line(field)
        self.path = path
        self.line = line
        self.problems = safe
        self.limit = limit


class _DuplicateKey(yaml.YAMLError):
    """A mapping names the same key twice (raised by :class:`_PolicyLoader`)."""

    def __init__(self, mapping: yaml.MappingNode, first: yaml.Node, second: yaml.Node) -> None:
        super().__init__(f"duplicate key {second.value!r}")
        self.mapping, self.first, self.second = mapping, first, second


#: The most bytes (UTF-8) of policy text read; a longer text is refused before it is parsed. The shipped presets
#: are a few KB. The operator's setting (``SHIFTLIGHT_POLICY_MAX_BYTES``) may raise it up to a ConfigMap's 1 MiB.
MAX_POLICY_BYTES = 64 * 1024
#: The deepest nesting of mappings and lists a policy may have (the policies in ``policies/`` nest four levels).
MAX_POLICY_DEPTH = 32
#: The most nodes (scalars, lists, mappings) a policy may have, counted while it is composed, and the most it may
#: stand for once each alias is counted again at every use (a few hundred in practice). A composed node costs
#: about 600 bytes, so the composer holds at most about 12 MiB, however large the text.
MAX_POLICY_NODES = 20_000


class _TooLarge(yaml.YAMLError):
    """The document nests too deep, has or expands to too many nodes, or an alias holds itself; ``limit`` names
    the bound (``depth``, ``nodes``, ``aliases``)."""

    def __init__(self, why: str, node_or_mark: yaml.Node | yaml.Mark | None, field: str = "", *, limit: str) -> None:
        super().__init__(why)
        mark = node_or_mark.start_mark if isinstance(node_or_mark, yaml.Node) else node_or_mark
        self.why, self.line, self.field = why, (mark.line + 1 if mark is not None else None), field
        self.limit = limit


class _PolicyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping naming a key twice is an error (SafeLoader keeps the last), and
    the composer stops at the first node past :data:`MAX_POLICY_NODES` or deeper than :data:`MAX_POLICY_DEPTH`:
    the walk ends there, before PyYAML has composed the rest of the document (memory and CPU bounded by the
    limit, not the text), and before its recursive composer and constructor could exhaust the stack."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[str] = []
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if parent is None:
            step = ""
        elif isinstance(index, yaml.Node):
            step = f".{index.value}" if isinstance(index.value, str) else ".<key>"
        else:
            step = f"[{index}]" if isinstance(index, int) else ".<key>"
        self._path.append(step)
        self._nodes += 1
        try:
            if len(self._path) > MAX_POLICY_DEPTH + 1:
                field = "".join(self._path[:3]).lstrip(".")
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _TooLarge(f"is nested more than {MAX_POLICY_DEPTH} levels deep", mark, field, limit="depth")
            if self._nodes > MAX_POLICY_NODES:
                field = "".join(self._path[:3]).lstrip(".")
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _TooLarge(
                    f"has more than {MAX_POLICY_NODES:,} nodes (values, lists and mappings)", mark, field, limit="nodes"
                )
            return super().compose_node(parent, index)
        finally:
            self._path.pop()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<' merges are resolved by SafeLoader; explicit keys may override merged ones
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeLoader reports it
                continue
            if first is not key_node:
                raise _DuplicateKey(node, first, key_node)
        return super().construct_mapping(node, deep=deep)


def _path_to(root: yaml.Node | None, target: yaml.Node) -> str:
    """The dotted field path of the mapping ``target`` inside ``root`` (empty for the root itself)."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                stack.append((value, f"{path}.{key_node.value}" if path else str(key_node.value)))
        elif isinstance(node, yaml.SequenceNode):
            stack += [(value, f"{path}[{i}]") for i, value in enumerate(node.value)]
    return ""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_size(root: yaml.Node) -> None:
    """Refuse a document that stands for more than :data:`MAX_POLICY_NODES` nodes once every alias is expanded (a
    "billion laughs"), or whose alias holds itself. One pass over the composed nodes (at most
    :data:`MAX_POLICY_NODES` of them, the composer saw to that); each is sized once."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_POLICY_NODES:
                raise _TooLarge(
                    f"expands to more than {MAX_POLICY_NODES} values through aliases", node, limit="aliases"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _TooLarge("has an alias that refers to a list or mapping containing it", node, limit="aliases")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _load_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The composed root node and the data of one YAML document; errors become :class:`PolicyError`, whatever
    raised them (a parse failure is a refusal naming the source, never an unexpected error in the cycle)."""
    loader = _PolicyLoader(text)
    root: yaml.Node | None = None
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_size(root)
        return root, (loader.construct_document(root) if root is not None else None)
    except _DuplicateKey as dup:
        parent = _path_to(root, dup.mapping)
        field = f"{parent}.{dup.second.value}" if parent else str(dup.second.value)
        first, second = dup.first.start_mark.line + 1, dup.second.start_mark.line + 1
        raise PolicyError(
            source,
            [f"{source}:{second}: {field}: duplicate key '{dup.second.value}' (first given on line {first})"],
            line=second,
            field=field,
        ) from None
    except _TooLarge as big:
        where = f"{source}:{big.line or '?'}"
        raise PolicyError(
            source,
            [f"{where}: {big.field or '<root>'}: refused: the document {big.why}"],
            line=big.line,
            field=big.field,
            limit=big.limit,
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(source, [f"{source}:{line or '?'}: not valid YAML: {exc}"], line=line) from exc
    except Exception as exc:  # RecursionError, a constructor's ValueError/OverflowError: refused, not a crash
        raise PolicyError(source, [f"{source}: not a readable YAML document ({type(exc).__name__})"]) from None
    finally:
        loader.dispose()


def _node_for(root: yaml.Node | None, loc: Sequence[int | str]) -> yaml.Node | None:
    """The YAML node a pydantic error location points at: the key node for a mapping key or a block-collection
    value (so the line is where the field is named), else the value node."""
    node: yaml.Node | None = root
    key_node: yaml.Node | None = None
    is_key = False
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            if part == "[key]":
                is_key = True
                continue
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                continue  # a union-member tag or a key the file does not have: stay here
            key_node, node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            key_node, node = None, node.value[part]
    if key_node is not None and (is_key or isinstance(node, yaml.MappingNode | yaml.SequenceNode)):
        return key_node
    return node


def _unwrap_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out += _unwrap_models(arg)
    return out


def _allowed_fields(loc: Sequence[int | str]) -> list[str]:
    """Field names allowed at the mapping that contains ``loc[-1]``."""
    models: list[type[BaseModel]] = [Policy]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            if part in m.model_fields:
                nxt += _unwrap_models(m.model_fields[part].annotation)
        if nxt:
            models = nxt
    return sorted({name for m in models for name in m.model_fields})


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]" or "[" in part or part.startswith(("function-", "list", "int", "float", "bool")):
            continue
        else:
            out += f".{part}" if out else part
    return out


def _describe(err: Any, root: yaml.Node | None, path: str) -> tuple[int | None, str, str]:
    loc = tuple(err["loc"])
    node = _node_for(root, loc)
    line = node.start_mark.line + 1 if node is not None else None
    field = _format_loc(loc)
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = f"unknown field '{loc[-1]}'; allowed: {', '.join(_allowed_fields(loc))}"
    elif "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict | list):
        msg = f"{msg} (got {err['input']!r})"
    where = f"{path}:{line}" if line else path
    return line, field, f"{where}: {field or '<root>'}: {msg}"


def _check_bytes(text: str, source: str, max_bytes: int) -> None:
    """Refuse a text of more than ``max_bytes`` UTF-8 bytes before anything parses it."""
    # a character is at least one byte: a text of more characters is over without encoding it
    size = len(text) if len(text) > max_bytes else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PolicyError(
            source,
            [f"{source}: <root>: refused: the policy is {size:,} bytes, more than the {max_bytes:,} allowed"],
            limit="bytes",
        )


def parse_policy(text: str, *, source: str = "<policy>", max_bytes: int = MAX_POLICY_BYTES) -> Policy:
    """Parse and validate policy YAML. Raises :class:`PolicyError` naming source, line, field, allowed values.

    Refused besides what the models refuse: a text of more than ``max_bytes`` bytes (before it is parsed), a
    document of more than :data:`MAX_POLICY_NODES` nodes or nested deeper than :data:`MAX_POLICY_DEPTH` (while it
    is composed), a key given twice in one mapping, an empty document (no text, only comments, or ``null``: write
    ``{}`` for the default policy), and a space of more than :data:`MAX_SPACE_COMBINATIONS` raw combinations."""
    _check_bytes(text, source, max_bytes)
    root, data = _load_yaml(text, source)
    if data is None:
        line = root.start_mark.line + 1 if root is not None else 1
        raise PolicyError(
            source,
            [f"{source}:{line}: <root>: the policy is empty (write {{}} for the default policy)"],
            line=line,
        )
    if not isinstance(data, dict):
        raise PolicyError(source, [f"{source}:1: a policy must be a YAML mapping, got {type(data).__name__}"], line=1)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        described = [_describe(e, root, source) for e in errors]
        # a union knob (list | range) reports one error per member: keep the list member's precise errors
        fields = [d[1] for d in described]
        # (and a range's errors over "not a valid list")
        described = [
            d
            for d, e in zip(described, errors, strict=True)
            if not (e["type"] in ("model_type", "dict_type") and any(f != d[1] and f.startswith(d[1]) for f in fields))
            and not (
                e["type"] == "list_type"
                and any(f.startswith(d[1]) and o["type"] != "list_type" for f, o in zip(fields, errors, strict=True))
            )
        ]
        described.sort(key=lambda d: d[0] or 0)
        first_line, first_field, _ = described[0]
        raise PolicyError(source, [d[2] for d in described], line=first_line, field=first_field) from exc
    if next(policy.space.configs(), None) is None:
        node = _node_for(root, ("space",))
        line = node.start_mark.line + 1 if node is not None else None
        raise PolicyError(
            source, [f"{source}:{line or '?'}: space: no config satisfies the constraints"], line=line, field="space"
        )
    return policy


def profile_feasibility(policy: Policy) -> Feasibility | None:
    """Memory-fit oracle from the simulator's performance model, when the policy's target names known model and
    GPU profiles (None otherwise)."""
    if policy.target.model is None or policy.target.gpu is None:
        return None
    try:
        perf = PerformanceModel.shared(policy.target.model, policy.target.gpu)
    except Exception:  # unknown profile: no oracle
        return None
    fn: Feasibility = perf.feasibility
    return fn


def load_policy(path: str | Path, *, max_bytes: int = MAX_POLICY_BYTES) -> Policy:
    """Read, validate and resolve a policy file; attaches the simulator's memory-fit oracle when available. At
    most ``max_bytes`` (and one more, to tell a longer file) are read."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(max_bytes + 1)
        text = raw.decode("utf-8")
    except OSError as exc:
        raise PolicyError(str(p), [f"{p}: cannot read policy: {exc.strerror or exc}"]) from exc
    except UnicodeDecodeError as exc:
        if len(raw) > max_bytes:  # cut inside a character: over the cap either way
            text = raw.decode("utf-8", "replace")
        else:
            raise PolicyError(str(p), [f"{p}: not UTF-8 text (byte {exc.start})"]) from None
    if len(raw) > max_bytes:
        raise PolicyError(
            str(p), [f"{p}: <root>: refused: the policy is more than the {max_bytes:,} bytes allowed"], limit="bytes"
        )
    policy = parse_policy(text, source=str(p), max_bytes=max_bytes)
    return policy.with_feasibility(profile_feasibility(policy))


def default_policy() -> Policy:
    """The built-in default (same as ``policies/v1/default.yaml`` without a target)."""
    return Policy()
