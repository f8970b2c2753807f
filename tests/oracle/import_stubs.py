"""Inert stub modules for packages an oracle's import path needs but the CPU machine lacks
(``triton``, ``torchvision``), served only to imports made by named modules, so that torch,
transformers and everything else keep seeing the packages as absent.

``StubFinder(roots, importers, marker, ...)``: a meta-path finder (``install()`` puts it first on
``sys.meta_path``) that answers an import of ``roots`` (a package and its submodules) with a stub
module when the importing module's name (+ ".") starts with one of ``importers``. A stub module's
attributes are ``StubValue``s: a decorator that returns what it decorates, a false-y
callable / subscriptable placeholder; with ``nested`` their attributes are stubs again (for code
that reads ``torchvision.transforms.v2.functional`` at import), without it they have none (so
probes such as ``triton.runtime.driver.active`` fail as on a machine without Triton). Each stub
module carries the attribute ``marker`` (``drop()`` forgets them from ``sys.modules``).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any


class StubValue:
    """What a stub module's attributes are (see the module docstring)."""

    def __init__(self, name: str, nested: bool) -> None:
        self._name, self._nested = name, nested

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return StubValue(f"{self._name}()", self._nested)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not self._nested:
            raise AttributeError(f"{self._name}.{name} (stub)")
        return StubValue(f"{self._name}.{name}", self._nested)

    def __getitem__(self, key: Any) -> Any:
        return StubValue(f"{self._name}[]", self._nested)

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __or__(self, other: Any) -> Any:     # a union in an annotation evaluated at import
        return StubValue(f"{self._name} | ...", self._nested)

    __ror__ = __or__

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


def importing_module() -> str:
    """The name of the module whose code runs the import in progress (past importlib's frames
    and this module's own)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if (not name.startswith(("importlib", "_frozen_importlib")) and frame.f_code.co_filename[:1] != "<"
                and name != __name__):
            return name
        frame = frame.f_back
    return ""


class StubFinder:
    """Meta-path finder of stub modules for ``roots``, to imports made by the modules whose name
    + "." starts with one of ``importers`` ("sglang." is sglang and its submodules, not
    sglang_driver); ``versions``: ``__version__`` of a root."""

    def __init__(self, roots: tuple[str, ...], importers: tuple[str, ...], marker: str,
                 versions: dict[str, str] | None = None, nested: bool = False) -> None:
        self.roots, self.importers, self.marker = roots, importers, marker
        self.versions, self.nested = versions or {}, nested

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname.split(".")[0] in self.roots and (importing_module() + ".").startswith(self.importers):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        setattr(module, self.marker, True)
        if spec.name in self.versions:
            module.__version__ = self.versions[spec.name]
        nested = self.nested

        def __getattr__(name: str, _prefix: str = spec.name) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return StubValue(f"{_prefix}.{name}", nested)

        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module) -> None:
        pass

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def drop(self) -> None:
        """Forget the stub modules (their importers keep their references), so that a later
        import from elsewhere fails as it would without the stubs."""
        for name in list(sys.modules):
            if name.split(".")[0] in self.roots and getattr(sys.modules[name], self.marker, False):
                del sys.modules[name]
