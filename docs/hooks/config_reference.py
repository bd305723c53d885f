"""The configuration reference page, generated from the config models so that it cannot drift.

Every key of ``evoforge.infra.config.RunConfig`` and its nested sections is listed with its type,
default and the comment the model's source gives it; the page opens with the full default file.
Example::

    page = config_page()  # markdown; its first yaml block loads as RunConfig()
"""

from __future__ import annotations

import ast
import functools
import inspect
import io
import tokenize
import types
import typing
from dataclasses import dataclass

import annotated_types
import yaml
from config_notes import NOTES
from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from evoforge.infra import config as config_module
from evoforge.infra import config_llm as config_llm_module
from evoforge.infra.config import EndpointConfig, ModelPrice, RunConfig

COMMENT_COLUMN = 34  # where the default file's comments start, as in a hand-written config

# Models that are the items of a list, a mapping or an optional value, not sections of their own:
# documented once each, under the keys that hold them.
ITEM_MODELS: tuple[tuple[type[BaseModel], str, str], ...] = (
    (EndpointConfig, "endpoint", "`llm.endpoints[]`, `analyze.llm`, `task_model.llm`"),
    (ModelPrice, "model price", "`llm.prices.<model>`"),
)


@dataclass(frozen=True)
class Key:
    """One configuration key: its dotted path, type, default and description."""

    path: str
    type: str
    default: str  # as YAML; empty for a section or a key that must be given
    about: str


@functools.cache
def field_comments() -> dict[str, dict[str, str]]:
    """The comment of each field of each model in infra/config.py (and config_llm.py, its LLM
    sections): {class: {field: text}}.

    A field's comment is the comment lines right above it and the comments on its own lines."""
    out: dict[str, dict[str, str]] = {}
    for module in (config_module, config_llm_module):
        out.update(_comments_in(inspect.getsource(module)))
    return out


def _comments_in(source: str) -> dict[str, dict[str, str]]:
    """field_comments() of one module's source."""
    by_line: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            by_line[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    out: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        fields = out.setdefault(node.name, {})
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            above = []
            line = statement.lineno - 1
            while line >= 1 and lines[line - 1].strip().startswith("#"):
                above.insert(0, by_line[line])
                line -= 1
            own = [by_line[n] for n in range(statement.lineno, statement.end_lineno + 1) if n in by_line]
            fields[statement.target.id] = " ".join(above + own)
    return out


def about(model: type[BaseModel], name: str, path: str) -> str:
    """What key `path` (field `name` of `model`) does: its comment in the code, else its note."""
    return (field_comments().get(model.__name__, {}).get(name) or NOTES.get(path)
            or NOTES.get(f"{model.__name__}.{name}", ""))


def _constraint(meta: object) -> str | None:
    if isinstance(meta, annotated_types.Ge):
        return f">= {meta.ge}"
    if isinstance(meta, annotated_types.Gt):
        return f"> {meta.gt}"
    if isinstance(meta, annotated_types.Le):
        return f"<= {meta.le}"
    if isinstance(meta, annotated_types.Lt):
        return f"< {meta.lt}"
    if isinstance(meta, annotated_types.MinLen):
        return f"length >= {meta.min_length}"
    if isinstance(meta, annotated_types.MaxLen):
        return f"length <= {meta.max_length}"
    return None


def _constraints(metadata: list) -> list[str]:
    out = []
    for meta in metadata:
        if isinstance(meta, annotated_types.GroupedMetadata):
            out += _constraints(list(meta))
        elif (text := _constraint(meta)) is not None:
            out.append(text)
    return out


def type_name(annotation: object, metadata: list | None = None) -> str:
    """A type annotation in words: `int (>= 1)`, `one of: async, sync`, `mapping of str to int`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    limits = _constraints(metadata or [])
    if origin is typing.Annotated:
        extra = [m for a in args[1:] for m in (a.metadata if hasattr(type(a), "model_fields") else [a])]
        return type_name(args[0], extra + (metadata or []))
    if origin is typing.Literal:
        text = "one of: " + ", ".join(str(a) for a in args)
    elif origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        text = " or ".join(type_name(a) for a in rest) + (" or null" if len(rest) < len(args) else "")
    elif origin is list:
        text = f"list of {type_name(args[0])}"
    elif origin is tuple:
        text = "pair of " + type_name(args[0]) if len(args) == 2 and args[0] == args[1] else "tuple"
    elif origin is dict:
        text = f"mapping of {type_name(args[0])} to {type_name(args[1])}"
    elif annotation is SecretStr:
        text = "secret string"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        text = next((f"{label} (below)" for model, label, _ in ITEM_MODELS if model is annotation),
                    "section")
    elif isinstance(annotation, type):
        text = annotation.__name__
    else:
        text = str(annotation)
    return f"{text} ({', '.join(limits)})" if limits else text


def flow(value: object) -> str:
    """A value as YAML on one line (flow style)."""
    return yaml.safe_dump([value], default_flow_style=True, sort_keys=False, width=1000).strip()[1:-1]


def _default(model: type[BaseModel], name: str) -> object:
    field = model.model_fields[name]
    if field.default is PydanticUndefined and field.default_factory is None:
        return PydanticUndefined
    value = field.get_default(call_default_factory=True)
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else _plain(value)


def _plain(value: object) -> object:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _is_section(model: type[BaseModel], name: str) -> bool:
    annotation = model.model_fields[name].annotation
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def keys(model: type[BaseModel], prefix: str = "") -> list[Key]:
    """Every key of `model`, sections' keys included, in the order the models declare them."""
    out = []
    for name, field in model.model_fields.items():
        default = _default(model, name)
        shown = "" if default is PydanticUndefined else flow(default)
        if _is_section(model, name):
            text = about(model, name, prefix + name) or (field.annotation.__doc__ or "").split("\n\n")[0]
            out.append(Key(prefix + name, "section", "", " ".join(text.split())))
            out += keys(field.annotation, prefix + name + ".")
        else:
            out.append(Key(prefix + name, type_name(field.annotation, field.metadata), shown,
                           about(model, name, prefix + name)))
    return out


def default_file() -> str:
    """The full default config as a YAML file, every key with its comment (it loads as RunConfig())."""
    lines: list[str] = []

    def walk(model: type[BaseModel], prefix: str, indent: str) -> None:
        for name in model.model_fields:
            comment = about(model, name, prefix + name)
            if _is_section(model, name):
                text = f"{indent}{name}:"
                lines.append(text.ljust(COMMENT_COLUMN) + f"# {comment}" if comment else text)
                walk(model.model_fields[name].annotation, prefix + name + ".", indent + "  ")
                continue
            text = f"{indent}{name}: {flow(_default(model, name))}"
            lines.append(text.ljust(COMMENT_COLUMN - 1) + f" # {comment}" if comment else text)

    walk(RunConfig, "", "")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def _table(rows: list[Key]) -> list[str]:
    out = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for key in rows:
        default = f"`{_cell(key.default)}`" if key.default else "required"
        out.append(f"| `{key.path}` | {_cell(key.type)} | {default} | {_cell(key.about)} |")
    return out


def config_page() -> str:
    """The whole reference page, as markdown."""
    out = [
        "# Configuration reference",
        "",
        "Generated from the config models (`evoforge.infra.config.RunConfig` and its sections) when",
        "the site is built, so it is always the code's. How a file, the environment and the flags",
        "combine: [Configuration](../guide/configuration.md).",
        "",
        "## The full default file",
        "",
        "Every key with its default and its comment in the code. Save it, keep what you change:",
        "",
        '```yaml title="config.yaml"',
        default_file().rstrip("\n"),
        "```",
        "",
        "## Every key",
        "",
    ]
    every = keys(RunConfig)
    top = [k for k in every if "." not in k.path and k.type != "section"]
    out += ["### Top level", "", *_table(top), ""]
    for section in (k for k in every if k.type == "section"):
        rows = [k for k in every if k.path.startswith(section.path + ".") and k.type != "section"
                and k.path.count(".") == section.path.count(".") + 1]
        out += [f"### `{section.path}`", "", section.about, "", *_table(rows), ""]
    for model, label, where in ITEM_MODELS:
        doc = " ".join((model.__doc__ or "").split())
        out += [f"### {label.capitalize()}", "", f"{doc} Used by {where}.", "",
                *_table(keys(model)), ""]
    return "\n".join(out)
