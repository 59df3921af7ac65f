"""The hybridad modules that a piece of code is built from, and their hash.

numba's disk cache checks only the cached function's own file.  Machine code
that inlined a function of another module, or froze another module's
constant, must be keyed by the source of every hybridad module it depends
on: :func:`module_closure` finds them (imports anywhere in a module,
relative ones resolved), :func:`library_digest` hashes their source.  Both
the plans' keys (:mod:`hybridad.backends.numba.cache`) and the stamps of the
library's own ``cache=True`` functions (:mod:`hybridad._libcache`) use it;
it imports nothing of the package.
"""

from __future__ import annotations

import functools
import hashlib
import re

__all__ = ["library_digest", "module_closure"]

_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)",
                   re.MULTILINE)
_PLAIN = re.compile(r"^[ \t]*import[ \t]+(hybridad[\w.]*)", re.MULTILINE)


def module_closure(names):
    """The source files of the hybridad modules ``names`` and of those they
    import, directly or through each other: ``from`` imports anywhere in a
    module (relative ones resolved), a name imported from a package that is
    itself a submodule counted as one.  A regular expression, not ``ast``
    (a tenth of the time); each module's own imports are read once per
    process (:func:`_imports`: the keys of one plan's programs ask for many
    overlapping closures)."""
    seen, stack, files = set(), list(names), []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        origin, imported = _imports(name)
        if origin is not None:
            files.append(origin)
            stack += imported
    return sorted(files)


@functools.lru_cache(maxsize=None)
def _imports(name):
    """``(source file, the hybridad modules it imports)`` of module ``name``;
    ``(None, ())`` for one with no Python source."""
    from importlib.util import find_spec

    spec = find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None, ()
    with open(spec.origin, encoding="utf-8") as fh:
        text = fh.read()
    package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
    out = list(_PLAIN.findall(text))
    for base, what in _FROM.findall(text):
        level = len(base) - len(base.lstrip("."))
        base = base.lstrip(".")
        if level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - level + 1] + ([base] if base else []))
        if base.split(".")[0] != "hybridad":
            continue
        out.append(base)
        for alias in what.strip("()").replace("\n", " ").split(","):
            leaf = alias.split()[0] if alias.split() else ""
            if leaf.isidentifier() and _is_submodule(f"{base}.{leaf}"):
                out.append(f"{base}.{leaf}")
    return spec.origin, tuple(out)


def _is_submodule(name):
    """Whether ``name`` is a module -- without importing its parent unless
    the parent is a package (``find_spec`` of ``a.b.c`` imports ``a.b``: of a
    name imported from a plain module, that would run the module)."""
    from importlib.util import find_spec

    parent = name.rpartition(".")[0]
    try:
        spec = find_spec(parent) if parent else None
        if parent and (spec is None or spec.submodule_search_locations is None):
            return False
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@functools.lru_cache(maxsize=64)
def library_digest(modules):
    """Hash of the source of the hybridad modules generated source imports,
    with everything they import from hybridad in turn: numba's cache does not
    see changes to functions a cached function calls (or to the constants it
    froze), so a change anywhere in that closure must change the key."""
    digest = hashlib.sha256()
    for path in module_closure(modules):
        digest.update(path.rsplit("hybridad", 1)[-1].encode())
        digest.update(_read(path))
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _read(path):
    with open(path, "rb") as fh:
        return fh.read()
