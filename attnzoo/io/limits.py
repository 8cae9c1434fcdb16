"""Bounds on what attnzoo reads from files it did not write: each file is read in bounded time and memory.

A saved folder's ``config.yaml``, a weights file's metadata JSON, a model card, a config or a recipe may
come from a stranger (a shared folder, a Hub repository). Each is read under these limits, and a file past
one is refused with an error naming the file, the limit, the value found and the environment variable
that raises it:

===============================  ==============  ======================================================================
variable                         default         what it bounds
===============================  ==============  ======================================================================
``ATTNZOO_MAX_CONFIG_BYTES``     33,554,432      bytes of a config.yaml, card, config or recipe (32 MiB)
``ATTNZOO_MAX_DEPTH``            100             levels a YAML or JSON value nests (attnzoo writes < 20)
``ATTNZOO_MAX_GRAPH_NODES``      6,000           layers plus calls of a converted Keras graph (loads in seconds)
``ATTNZOO_MAX_DOWNLOAD_BYTES``   17,179,869,184  bytes of a download whose card states no ``file_size``
``ATTNZOO_MAX_TOKENIZER_BYTES``  268,435,456     bytes of a tokenizer's vocabulary, merges or SentencePiece model, or
                                                 of a port's ``tokenizer.json`` (256 MiB; a 262,144-token one is ~35 MB)
``ATTNZOO_MAX_NAME_CHARS``       1,000           characters of a name in a Keras config (a layer's, a model's, an
                                                 input's: Keras writes tens; each name is copied into code and reports)
===============================  ==============  ======================================================================

Sizes are read one byte past the limit, so the limit can fire; depth is counted on the YAML parser's event
stream (PyYAML's C parser, which keeps its own stack) or on JSON's brackets before the recursive parse, so
a document nested 200,000 deep ends at once with an error, never a ``RecursionError`` or a crash.
:func:`load_yaml` builds a document in that one pass over the events, with no recursion.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from attnzoo.errors import AttnzooError, ConfigError, WeightsError

__all__ = [
    "LIMITS",
    "limit",
    "over_limit",
    "read_bounded",
    "load_yaml",
    "check_yaml_depth",
    "load_json",
    "check_names",
]

# variable -> (default, what it counts)
LIMITS: dict[str, tuple[int, str]] = {
    "ATTNZOO_MAX_CONFIG_BYTES": (32 << 20, "bytes"),
    "ATTNZOO_MAX_DEPTH": (100, "levels of nesting"),
    "ATTNZOO_MAX_GRAPH_NODES": (6_000, "layers and calls"),
    "ATTNZOO_MAX_DOWNLOAD_BYTES": (16 << 30, "bytes"),
    "ATTNZOO_MAX_TOKENIZER_BYTES": (256 << 20, "bytes"),
    "ATTNZOO_MAX_NAME_CHARS": (1_000, "characters"),
}


def limit(variable: str) -> int:
    """The limit ``variable`` sets (read at call time), else its default; a value that is no positive
    whole number is a ``ConfigError`` naming the variable."""
    default, _ = LIMITS[variable]
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    if not re.fullmatch(r"[0-9]{1,19}", raw) or int(raw) < 1:
        raise ConfigError(f"{variable} must be a whole number above 0, got {raw!r:.40}; unset it for {default:,}")
    return int(raw)


def over_limit(variable: str, found: str, where: Any, error: type[AttnzooError] = WeightsError) -> AttnzooError:
    """The error of a file past a limit: ``where`` and ``found`` (what it holds: "is 40,000,000 bytes"), the
    limit and how to raise it."""
    return error(
        f"{where} {found}, over the limit of {limit(variable):,} {LIMITS[variable][1]} ({variable}); a file "
        f"attnzoo wrote stays far below it, so this one was made or edited by hand: if you trust it, raise the "
        f"limit ({variable}=N)"
    )


def read_bounded(path: Path, where: Any, error: type[AttnzooError] = WeightsError) -> str:
    """A text file's content, read up to one byte past ``ATTNZOO_MAX_CONFIG_BYTES`` so the limit fires."""
    bound = limit("ATTNZOO_MAX_CONFIG_BYTES")
    with open(path, "rb") as handle:
        data = handle.read(bound + 1)
    if len(data) > bound:
        raise over_limit("ATTNZOO_MAX_CONFIG_BYTES", f"is over {bound:,} bytes", where, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text ({e.reason})") from None


def _line(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f"line {mark.line + 1}" if mark is not None else "the document"


def _loader(text: str) -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)


def _yaml_error(e: Exception, where: Any, error: type[AttnzooError]) -> AttnzooError:
    """The parser's own error; libyaml's nesting bound (1,000 brackets, met while it scans ahead) as ours."""
    if "maximum nesting depth" in str(e):
        mark = getattr(e, "problem_mark", None)
        at = f" (at line {mark.line + 1})" if mark is not None else ""
        bound = limit("ATTNZOO_MAX_DEPTH")
        return over_limit("ATTNZOO_MAX_DEPTH", f"nests deeper than {bound} levels{at}", where, error)
    return error(f"{where}: not valid YAML ({' '.join(str(e).split())[:200]})")


def check_yaml_depth(text: str, where: Any, error: type[AttnzooError] = WeightsError) -> None:
    """Refuse a YAML document nested deeper than ``ATTNZOO_MAX_DEPTH``, counted on the parser's events
    before anything recursive (a composer, omegaconf) sees it."""
    import yaml

    bound, depth = limit("ATTNZOO_MAX_DEPTH"), 0
    loader = _loader(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > bound:
                    raise over_limit(
                        "ATTNZOO_MAX_DEPTH", f"nests deeper than {bound} levels (at {_line(event)})", where, error
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as e:
        raise _yaml_error(e, where, error) from None
    finally:
        loader.dispose()


def load_yaml(text: str, where: Any, error: type[AttnzooError] = WeightsError) -> Any:
    """One YAML document as plain data (what ``yaml.safe_load`` gives), built in one pass over the C
    parser's events with an explicit stack: nesting past ``ATTNZOO_MAX_DEPTH``, aliases (``*name``, which
    attnzoo never writes: a few hundred bytes of them expand into billions of values), tags outside YAML's
    plain types, a second document, and a number Python refuses (a 100,000-digit int) are each an
    ``error`` naming the line."""
    import yaml
    from yaml.nodes import ScalarNode

    bound = limit("ATTNZOO_MAX_DEPTH")
    loader = _loader(text)
    stack: list[list[Any]] = []  # open collections: [value, pending key (mappings), is_mapping, where it sits]
    documents: list[Any] = []
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
                if isinstance(event, yaml.ScalarEvent):
                    value = _scalar(loader, event, ScalarNode, (where, stack), error)
                else:
                    if len(stack) >= bound:
                        raise over_limit(
                            "ATTNZOO_MAX_DEPTH", f"nests deeper than {bound} levels (at {_line(event)})", where, error
                        )
                    if event.tag not in (None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):
                        raise error(f"{where}: {_line(event)}: the tag {event.tag!r} is no plain YAML value")
                    value = {} if isinstance(event, yaml.MappingStartEvent) else []
                label = _label(stack[-1]) if stack else ""
                _add(stack, documents, value, event, where, error)
                if isinstance(event, yaml.CollectionStartEvent):
                    stack.append([value, _NO_KEY, isinstance(value, dict), label])
            elif isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
            elif isinstance(event, yaml.AliasEvent):
                raise error(
                    f"{where}: {_line(event)}: uses YAML aliases (*name), which attnzoo never writes; refusing to "
                    f"expand them (restore the file)"
                )
    except yaml.YAMLError as e:
        raise _yaml_error(e, where, error) from None
    finally:
        loader.dispose()
    if len(documents) > 1:
        raise error(f"{where}: holds {len(documents)} YAML documents; expected one")
    return documents[0] if documents else None


_NO_KEY = object()
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")  # a plain decimal int (YAML 1.1 reads 012 as octal)
_PLAIN_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "timestamp", "binary")}


def _scalar(loader: Any, event: Any, node_class: type, at: tuple[Any, list], error: type[AttnzooError]) -> Any:
    """One scalar's value; ``at``, the file and the open collections, names where in an error."""
    tag = event.tag
    if tag is None or tag == "!":
        tag = loader.resolve(node_class, event.value, event.implicit)
    if tag == "tag:yaml.org,2002:str":
        return event.value
    if tag == "tag:yaml.org,2002:int" and _DECIMAL.fullmatch(event.value):  # the common case, without a node
        return int(event.value)
    if tag == "tag:yaml.org,2002:null":
        return None
    where = f"{at[0]}: {_line(event)}"
    if tag not in _PLAIN_TAGS:
        raise error(f"{where}: the tag {tag!r} is no plain YAML value")
    node = node_class(tag, event.value, event.start_mark, event.end_mark, event.style)
    try:
        return loader.yaml_constructors[tag](loader, node)
    except ValueError as e:  # a number past Python's 4,300 digits; a date that is none
        if tag == "tag:yaml.org,2002:int":
            digits = sum(c.isdigit() for c in event.value)
            raise error(
                f"{where}: {_path(at[1])} {event.value[:12]}... is an integer of {digits:,} digits, past the "
                f"{sys.get_int_max_str_digits():,} Python reads and far past any value attnzoo writes"
            ) from None
        raise error(
            f"{where}: {_path(at[1])} {event.value[:40]!r} is not a {tag.rsplit(':', 1)[-1]} ({e})"[:300]
        ) from None


def _label(top: list[Any]) -> str:
    """Where the next value of the open collection ``top`` goes: ``.key`` or ``[index]``."""
    if not top[2]:
        return f"[{len(top[0])}]"
    return "" if top[1] is _NO_KEY else f".{top[1]}"


def _path(stack: list[list[Any]]) -> str:
    """Where the parser is, as keys and list positions (``config.graph.layers.dense.units``), for an error
    about the value it reads next."""
    text = ("".join(top[3] for top in stack) + (_label(stack[-1]) if stack else "")).lstrip(".")
    return f"{text[:200]}:" if text else "the value"


def _add(stack: list[list[Any]], documents: list[Any], value: Any, event: Any, where: Any, error: Any) -> None:
    """Put ``value`` where it goes: the document, a list's next item, a mapping's key or that key's value."""
    if not stack:
        documents.append(value)
        return
    top = stack[-1]
    if not top[2]:
        top[0].append(value)
    elif top[1] is _NO_KEY:
        if isinstance(value, (dict, list)):
            raise error(f"{where}: {_line(event)}: a mapping key is a collection; expected a plain key")
        if value == "<<" and event.implicit[0]:
            raise error(f"{where}: {_line(event)}: uses a YAML merge key (<<), which attnzoo never writes")
        top[1] = value
    else:
        top[0][top[1]] = value
        top[1] = _NO_KEY


def load_json(text: str | bytes, where: Any, what: str = "JSON", error: type[AttnzooError] = WeightsError) -> Any:
    """JSON from a file, nested no deeper than ``ATTNZOO_MAX_DEPTH``: ``json.loads`` stops a document nested
    past Python's recursion limit at once (a ``RecursionError``, reported here as the depth limit), and a
    value that parsed is measured with an explicit stack. Invalid JSON or a number Python refuses (a
    100,000-digit int) is an ``error`` naming ``what``."""
    import json

    bound = limit("ATTNZOO_MAX_DEPTH")
    try:
        value = json.loads(text)
    except RecursionError:
        found = f"nests more than {sys.getrecursionlimit():,} levels deep"
        raise over_limit("ATTNZOO_MAX_DEPTH", found, f"{where}: {what}", error) from None
    except ValueError as e:
        raise error(f"{where}: {what} is not valid JSON ({' '.join(str(e).split())[:160]})") from None
    raw = text.decode("latin-1") if isinstance(text, bytes) else text  # only brackets are counted
    opening = raw.count("[") + raw.count("{")
    if opening > bound:  # fewer brackets than the limit cannot nest past it
        deepest = _depth(value, bound)
        if deepest > bound:
            raise over_limit("ATTNZOO_MAX_DEPTH", f"nests deeper than {bound} levels", f"{where}: {what}", error)
    return value


def _depth(value: Any, bound: int) -> int:
    """How deep ``value``'s lists and dicts nest, counted up to ``bound + 1`` with an explicit stack."""
    if not isinstance(value, (dict, list)):
        return 0
    stack, deepest = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > bound:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        stack += [(v, depth + 1) for v in children if isinstance(v, (dict, list))]
    return deepest


# the keys of a Keras config whose strings are names: a layer's or model's own, and the references to them
_NAME_KEYS = frozenset({"name", "keras_history", "inbound_nodes", "input_layers", "output_layers"})


def check_names(value: Any, where: Any, error: type[AttnzooError] = WeightsError) -> None:
    """Refuse a Keras config holding a name longer than ``ATTNZOO_MAX_NAME_CHARS``, in one pass with an
    explicit stack before anything copies the names (into identifiers, emitted code, reports: a 5 MB name
    took minutes there). A name is a string under one of ``_NAME_KEYS``, however deep."""
    bound = limit("ATTNZOO_MAX_NAME_CHARS")
    stack: list[tuple[Any, str | None]] = [(value, None)]
    while stack:
        item, key = stack.pop()
        if isinstance(item, dict):
            stack += [(v, k if k in _NAME_KEYS else key) for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(v, key) for v in item]
        elif key is not None and isinstance(item, str) and len(item) > bound:
            from attnzoo.io.text import printable

            found = f"holds a name {len(item):,} characters long (under {key!r}: {printable(item[:40])}...)"
            raise over_limit("ATTNZOO_MAX_NAME_CHARS", found, where, error)
