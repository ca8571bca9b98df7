"""Write clients/python/API.md, the API reference, from the package's docstrings.

    python scripts/api_doc.py          # write API.md
    python scripts/api_doc.py --check  # exit 1 if API.md is not what the code says

Every public module, class, method, property and function, with its signature and its
docstring, in a fixed order (modules as listed in ``MODULES``, members in source order), so
the file changes only when the API or its documentation does. ``tests/test_api_doc.py``
runs ``--check``.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "API.md"
MODULES = [
    "pricewire_client",
    "pricewire_client.session",
    "pricewire_client.subscriber",
    "pricewire_client.aio",
    "pricewire_client.aio.session",
    "pricewire_client.aio.subscriber",
    "pricewire_client.model",
    "pricewire_client.errors",
    "pricewire_client.tracker",
    "pricewire_client.failover",
    "pricewire_client.reconnect",
    "pricewire_client.core",
    "pricewire_client.transport",
    "pricewire_client.messages",
    "pricewire_client.codec",
    "pricewire_client.schema",
]
HEADER = """# pricewire-client API reference

Generated from the docstrings by `scripts/api_doc.py` (checked by `tests/test_api_doc.py`:
edit the docstrings, then run `python scripts/api_doc.py`). The guide is
[README.md](README.md).
"""


def default_text(value: Any) -> str:
    """A default value as source-like text."""
    if isinstance(value, enum.Enum):
        kind = type(value).__name__
        return f"{kind}.{value.name}" if value.name else f"{kind}({value.value})"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def signature(obj: Any) -> str:
    """``(a: int, b: str = 'x') -> T`` without the quotes of postponed annotations."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts = []
    star_done = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = prefix + p.name
        if p.annotation is not p.empty:
            text += f": {str(p.annotation).strip(chr(39))}"
        if p.default is not p.empty:
            text += f" = {default_text(p.default)}"
        parts.append(text)
    ret = ""
    if sig.return_annotation is not sig.empty:
        ret = f" -> {str(sig.return_annotation).strip(chr(39))}"
    return f"({', '.join(parts)}){ret}"


def doc(obj: Any) -> str:
    text = inspect.getdoc(obj) or ""
    return text.strip() + "\n" if text else ""


def defined_here(module: ModuleType, obj: Any) -> bool:
    return getattr(obj, "__module__", None) == module.__name__


def public_names(module: ModuleType) -> list[str]:
    """``__all__`` when the module has one, else its public names, in source order."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if not n.startswith("_")]


def members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined on ``cls`` itself, in source order."""
    out = []
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__iter__", "__aiter__", "__enter__"):
            continue
        if name in fields:
            continue
        if isinstance(value, property | staticmethod | classmethod) or inspect.isfunction(value):
            out.append((name, value))
    return out


def class_section(qual: str, cls: type) -> list[str]:
    lines = [f"### `{qual}`\n"]
    if issubclass(cls, enum.Enum):
        lines.append(f"`{cls.__name__}{enum_bases(cls)}`\n")
        lines.append(doc(cls))
        lines.append(", ".join(f"`{m.name}` = {m.value}" for m in cls) + "\n")
        return lines
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    head = f"class {cls.__name__}" + (f"({', '.join(bases)})" if bases else "")
    lines.append(f"`{head}{signature(cls).removesuffix(' -> None')}`\n")
    lines.append(doc(cls))
    for name, value in members(cls):
        lines += member_lines(name, value)
    return lines


def enum_bases(cls: type) -> str:
    return f"({', '.join(b.__name__ for b in cls.__bases__)})"


def member_lines(name: str, value: Any) -> list[str]:
    if isinstance(value, property):
        kind = "property" if value.fset is None else "property, settable"
        out = [f"- `{name}` ({kind})"]
        text = doc(value.fget)
    else:
        func = value.__func__ if isinstance(value, staticmethod | classmethod) else value
        prefix = "async " if inspect.iscoroutinefunction(func) else ""
        out = [f"- `{prefix}{name}{signature(func)}`"]
        text = doc(func)
    if text:
        out.append("\n" + "".join(f"  {line}\n" if line else "\n" for line in text.splitlines()))
    else:
        out.append("")
    return ["\n".join(out).rstrip() + "\n"]


def module_section(name: str) -> list[str]:
    module = importlib.import_module(name)
    lines = [f"## `{name}`\n", doc(module)]
    for attr in public_names(module):
        obj = getattr(module, attr)
        if inspect.isclass(obj) and defined_here(module, obj) and obj.__name__ != attr:
            lines.append(f"### `{name}.{attr}`\n")
            lines.append(f"Another name of `{obj.__name__}`.\n")
        elif inspect.isclass(obj) and defined_here(module, obj):
            lines += class_section(f"{name}.{attr}", obj)
        elif inspect.isfunction(obj) and defined_here(module, obj):
            lines.append(f"### `{name}.{attr}{signature(obj)}`\n")
            lines.append(doc(obj))
        elif name == "pricewire_client" or name == "pricewire_client.aio":
            continue  # the package's names are documented where they are defined
    return lines


def render() -> str:
    parts = [HEADER]
    for name in MODULES:
        parts += module_section(name)
    text = "\n".join(p.rstrip("\n") + "\n" for p in parts if p)
    return text.replace("\n\n\n", "\n\n")


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is not current: run python scripts/api_doc.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
