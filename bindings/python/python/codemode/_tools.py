"""Python callables as codemode tools: names, descriptions and input schemas
derived from the function (type hints, docstring) unless given, and how a
tool is called with the JSON input a cell sent."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

_SOURCES = ("client", "plugin", "openclaw")


@dataclasses.dataclass(frozen=True)
class Tool:
    """One tool a cell can call (`tools.<name>(input)`); the model never sees it directly."""

    function: Callable[..., Any]
    name: str
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    needs_approval: bool = False
    annotations: Mapping[str, Any] | None = None
    source: str = "client"
    owner: str = "app"
    #: Whether the function is ``async def`` (set from it).
    is_async: bool = dataclasses.field(init=False, default=False)

    @property
    def id(self) -> str:
        """The catalog id, `<source>:<owner>:<name>`."""
        return f"{self.source}:{self.owner}:{self.name}"

    def definition(self) -> dict[str, Any]:
        """What the runtime gets (everything but the function)."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "owner": self.owner,
            "needsApproval": self.needs_approval,
        }
        if self.input_schema is not None:
            out["inputSchema"] = dict(self.input_schema)
        if self.annotations is not None:
            out["annotations"] = dict(self.annotations)
        return out

    def __post_init__(self) -> None:
        # Read once: signature and type hints cost more than a fast tool.
        object.__setattr__(self, "_model", _model_parameter(self.function))
        object.__setattr__(
            self,
            "is_async",
            inspect.iscoroutinefunction(self.function)
            or inspect.iscoroutinefunction(getattr(self.function, "__call__", None)),
        )

    def call(self, arguments: Any) -> Any:
        """Calls the function with the cell's input (keyword arguments from
        an object; a single pydantic model parameter gets the whole object).
        An async function's awaitable is returned as it is."""
        model = getattr(self, "_model", None)
        if model is not None:
            return self.function(model.model_validate(arguments if arguments is not None else {}))
        if arguments is None:
            return self.function()
        if not isinstance(arguments, dict):
            raise TypeError(f"expected an object of named arguments, got {type(arguments).__name__}")
        return self.function(**arguments)


@typing.overload
def tool(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    needs_approval: bool = False,
    annotations: Mapping[str, Any] | None = None,
    source: str = "client",
    owner: str = "app",
) -> Tool: ...


@typing.overload
def tool(
    function: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    needs_approval: bool = False,
    annotations: Mapping[str, Any] | None = None,
    source: str = "client",
    owner: str = "app",
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    needs_approval: bool = False,
    annotations: Mapping[str, Any] | None = None,
    source: str = "client",
    owner: str = "app",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Makes a `Tool` of a function; usable as `@tool` or `@tool(name=...)`.
    Plain functions given to `CodeMode(tools=[...])` are wrapped the same way."""

    def make(fn: Callable[..., Any]) -> Tool:
        return as_tool(
            fn,
            name=name,
            description=description,
            input_schema=input_schema,
            needs_approval=needs_approval,
            annotations=annotations,
            source=source,
            owner=owner,
        )

    if function is not None:
        return make(function)
    return make


def as_tool(
    fn: Callable[..., Any] | Tool,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    needs_approval: bool = False,
    annotations: Mapping[str, Any] | None = None,
    source: str = "client",
    owner: str = "app",
) -> Tool:
    if isinstance(fn, Tool):
        return fn
    if not callable(fn):
        raise TypeError(f"codemode: a tool must be a callable or codemode.Tool, got {type(fn).__name__}")
    tool_name = name or getattr(fn, "__name__", None)
    if not isinstance(tool_name, str) or not tool_name or tool_name == "<lambda>":
        raise TypeError("codemode: this tool has no usable name: pass name=... (lambdas have none)")
    if source not in _SOURCES:
        raise TypeError(f"codemode: tool {tool_name}: source must be one of {', '.join(_SOURCES)}; MCP tools come from mcp_servers")
    doc = inspect.getdoc(fn) or ""
    return Tool(
        function=fn,
        name=tool_name,
        description=description if description is not None else doc,
        input_schema=input_schema if input_schema is not None else schema_of(fn),
        needs_approval=needs_approval,
        annotations=annotations,
        source=source,
        owner=owner,
    )


def _model_parameter(fn: Callable[..., Any], strict: bool = False) -> type | None:
    """The pydantic model of a function whose one parameter is a model."""
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 1:
        return None
    hints = _hints(fn, strict)
    hint = hints.get(params[0].name)
    if isinstance(hint, type) and hasattr(hint, "model_validate") and hasattr(hint, "model_json_schema"):
        return hint
    return None


def _hints(fn: Callable[..., Any], strict: bool = False) -> dict[str, Any]:
    """The function's resolved type hints. ``strict``: a hint that cannot be
    resolved is an error naming the parameter (a schema must not be guessed)."""
    try:
        return typing.get_type_hints(fn)
    except Exception as e:
        if not strict:
            return {}
        name = getattr(fn, "__name__", "tool")
        params = list(inspect.signature(fn).parameters)
        raw = getattr(fn, "__annotations__", {})
        bad = next((p for p in params if isinstance(raw.get(p), str) and str(raw[p]) in str(e)), params[0] if params else "?")
        raise TypeError(
            f"codemode: tool {name}: cannot resolve the type hint of parameter {bad} ({e}); "
            "define its type at module level (a class defined inside a function cannot be resolved "
            "under `from __future__ import annotations`), or pass input_schema=..."
        ) from e


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema of the function's parameters: pydantic's when pydantic
    is installed (it handles any annotation it knows), else a small mapping
    of the builtin types."""
    model = _model_parameter(fn, strict=True)
    if model is not None:
        return dict(model.model_json_schema())  # type: ignore[attr-defined]
    hints = _hints(fn, strict=True)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    try:
        import pydantic

        fields: dict[str, Any] = {}
        for p in params:
            annotation = hints.get(p.name, Any)
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (annotation, default)
        schema = pydantic.create_model(getattr(fn, "__name__", "input"), **fields).model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        return dict(schema)
    except ImportError:
        pass
    properties = {p.name: _json_type(hints.get(p.name, Any)) for p in params}
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _json_type(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            return _json_type(kinds[0])
        return {"anyOf": [_json_type(a) for a in kinds]}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if hint is list or origin is list:
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    return {}


def to_json(value: Any) -> str:
    """A tool's result as JSON: pydantic models and dataclasses are dumped."""
    return json.dumps(value, default=_default, allow_nan=False)


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
