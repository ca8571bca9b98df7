"""README.md's code says what the package has: every Python block compiles, every name it
imports from pricewire_client exists, and every method or attribute it uses exists on one
of the public classes (a renamed or removed API fails here, not in a user's hands)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pricewire_client
from pricewire_client import aio

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
# Names the examples bind to something that is not pricewire's (stdlib, locals).
NOT_OURS = {"run", "basicConfig", "create_default_context", "print", "enumerate", "gather"}


def instance_attributes(cls: type) -> set[str]:
    """``self.x = ...`` in the ``__init__`` of ``cls`` and its bases of this package."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is not None and klass.__module__.startswith("pricewire_client"):
            try:
                source = inspect.getsource(init)
            except (OSError, TypeError):  # a dataclass's generated __init__
                continue
            names |= set(re.findall(r"self\.(\w+)(?:, self\.\w+)* =", source))
            names |= set(re.findall(r"self\.\w+, self\.(\w+) =", source))
    return names


def public_attributes() -> set[str]:
    names: set[str] = set()
    for module in (pricewire_client, aio):
        for obj in vars(module).values():
            if inspect.isclass(obj):
                names |= {n for n in dir(obj) if not n.startswith("_")}
                names |= set(getattr(obj, "__dataclass_fields__", {}))
                names |= instance_attributes(obj)
    return names | set(dir(pricewire_client)) | set(dir(aio))


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 4


def test_readme_examples_use_what_exists() -> None:
    known = public_attributes()
    for block in BLOCKS:
        tree = ast.parse(block)  # a syntax error fails here
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "pricewire" in node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
            if isinstance(node, ast.Attribute) and node.attr not in NOT_OURS:
                assert node.attr in known, f"README uses .{node.attr}, which no class has"
