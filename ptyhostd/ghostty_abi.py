"""The libghostty-vt binding: pyghostty's declarations and library, loaded fast.

pyghostty binds the library with cffi in ABI mode, which parses its 80 KB of C
declarations with pycparser at every import: 0.35-0.5 s here, more than the rest of a
host's start, and paid again by every restarted host before its first repaint (a
reattaching `clowderctl attach` saw its screen 0.5-0.6 s after a crash of the host,
against 0.15-0.19 s with pyte; docs/design.md, "The engine's load after a restart").  cffi's out-of-line ABI mode keeps the
parsed declarations as a Python module of serialized types, whose import needs no
pycparser (~15 ms).  So this module reads pyghostty's declarations (its ``_cdef.py``,
without importing the package) and finds its bundled library, builds that module once
per set of declarations into the host's cache directory (``$CACHE_DIRECTORY``, the
unit's ``CacheDirectory=``), and loads it from there at later starts.  Without a cache
directory, or with one that cannot be written, it parses in memory as pyghostty does.

Everything of ghostty the host calls goes through ``ffi`` and ``lib`` here (one cffi
instance: cdata of one cannot be passed to functions of another), with the few helpers
of pyghostty's own layer it used (``Terminal``, ``init_sized``, ``union_fn``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import io
import logging
import os
import time
import weakref
from typing import Optional

log = logging.getLogger("ptyhostd")

# ABI-mode cffi cannot pass unions by value; ghostty's points are tagged unions passed
# by value (more than 16 bytes: in memory on x86-64, indirectly on arm64), so a
# struct of the same layout has the same call ABI (as pyghostty declares it).
TWINS = """
typedef struct { uint16_t x; uint32_t y; uint64_t _pad; } GhosttyPointValueS;
typedef struct { GhosttyPointTag tag; GhosttyPointValueS value; } GhosttyPointS;
"""
MODULE = "_clowder_ghostty_abi"  # the out-of-line module's name, in its file too

ffi = None
lib = None
loaded_from = ""  # how the declarations were had: "cache", "parsed, cached", "parsed"
library_path = ""  # the libghostty-vt loaded


class GhosttyError(RuntimeError):
    """A libghostty-vt call failed."""


class NotInstalled(GhosttyError, ImportError):
    """No pyghostty to load the binding from (an ImportError, as its import would be)."""


def check(result: int, what: str) -> None:
    if result:
        raise GhosttyError(f"ghostty: {what} failed (result {result})")


def _pyghostty_dir(where: str) -> str:
    """pyghostty's package directory, found without importing it ("" is the Python
    environment, else the directory it was installed into: engine.PACKAGED)."""
    spec = importlib.machinery.PathFinder.find_spec("pyghostty", [where]) if where \
        else importlib.util.find_spec("pyghostty")
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled("pyghostty is not installed")
    return list(spec.submodule_search_locations)[0]


def _declarations(package: str) -> str:
    """pyghostty's C declarations: ``CDEF`` of its generated ``_cdef.py``."""
    path = os.path.join(package, "_cdef.py")
    with open(path, encoding="utf-8") as f:
        namespace: dict = {}
        exec(compile(f.read(), path, "exec"), namespace)  # one string constant
    cdef = namespace.get("CDEF")
    if not isinstance(cdef, str):
        raise GhosttyError(f"{path} defines no CDEF")
    return cdef + TWINS


def _library(package: str) -> str:
    path = os.environ.get("PYGHOSTTY_LIB") or os.path.join(package, "_lib",
                                                           "libghostty-vt.so")
    if not os.path.exists(path):
        raise GhosttyError(f"libghostty-vt not found at {path}")
    return path


def _cached(path: str):
    """The ffi of the out-of-line module at ``path``, or None if it is not usable."""
    try:
        spec = importlib.util.spec_from_file_location(MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.ffi
    except FileNotFoundError:
        return None
    except Exception as exc:  # a torn or foreign file: made again below
        log.warning("the cached ghostty binding %s is unusable (%s); it is made again",
                    path, exc, extra={"CLOWDER_CAUSE": "screen-engine-cache"})
        return None


def _parse(cdef: str, path: Optional[str]):
    """Parse the declarations (pycparser, the slow part); write the out-of-line module
    to ``path`` if given (atomically: a reader never sees half of it)."""
    import cffi
    parsed = cffi.FFI()
    parsed.cdef(cdef)
    if path is None:
        return parsed, "parsed"
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        parsed.set_source(MODULE, None)
        with contextlib.redirect_stdout(io.StringIO()):  # cffi says "generating ..."
            parsed.emit_python_code(tmp)
        os.replace(tmp, path)
        return parsed, "parsed, cached"
    except OSError as exc:
        log.warning("the ghostty binding cannot be cached in %s (%s); every start parses "
                    "it", os.path.dirname(path), exc,
                    extra={"CLOWDER_CAUSE": "screen-engine-cache"})
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return parsed, "parsed"


def load(where: Optional[str] = None, cache_dir: Optional[str] = None) -> None:
    """Load the binding once: ``ffi`` and ``lib`` of this module.  ``where``: as
    engine's ``_pyghostty_where`` says (None: ask it); ``cache_dir`` defaults to
    $CACHE_DIRECTORY (unset: no cache)."""
    global ffi, lib, loaded_from, library_path
    if lib is not None:
        return
    started = time.monotonic()
    if where is None:
        from .engine import _pyghostty_where
        where = _pyghostty_where() or ""
    package = _pyghostty_dir(where)
    cdef = _declarations(package)
    import _cffi_backend  # cffi's C part: no pycparser
    key = hashlib.sha256(f"{_cffi_backend.__version__}\0{cdef}".encode()).hexdigest()[:16]
    cache_dir = cache_dir if cache_dir is not None else \
        (os.environ.get("CACHE_DIRECTORY") or "").split(":")[0] or None
    path = os.path.join(cache_dir, f"ghostty_abi_{key}.py") if cache_dir else None
    got = _cached(path) if path else None
    how = "cache"
    if got is None:
        got, how = _parse(cdef, path)
    path_of_library = _library(package)
    library = got.dlopen(path_of_library)
    ffi, lib, loaded_from, library_path = got, library, how, path_of_library
    log.info("ghostty binding loaded in %.0f ms (%s%s)", (time.monotonic() - started) * 1e3,
             how, f": {path}" if path else "", extra={"CLOWDER_CAUSE": "screen-engine-binding",
                                                       "CLOWDER_ENGINE_BINDING": how})


_sized_blank: dict = {}  # ctype -> the bytes of a zeroed one with its sizes set


def init_sized(ctype: str):
    """A new ``ctype`` struct with its ``size`` fields set, nested ones too (ghostty's
    convention for structs that may grow).  The fields are found by cffi's introspection
    once a type, then copied: walking them at every call was a quarter of a repaint's
    time (25 recursive calls a repaint, ~50 of its ~190 us)."""
    p = ffi.new(ctype + "*")
    blank = _sized_blank.get(ctype)
    if blank is None:
        _set_sizes(p)
        _sized_blank[ctype] = bytes(ffi.buffer(p))
    else:
        ffi.memmove(p, blank, len(blank))
    return p


def _set_sizes(p) -> None:
    t = ffi.typeof(p).item
    for name, field in t.fields:
        if name == "size":
            p.size = ffi.sizeof(t)
        elif field.type.kind == "struct":
            _set_sizes(ffi.addressof(p[0], name))


_union_fns: dict = {}


def union_fn(name: str, signature: str):
    """The function ``name`` cast to ``signature``, whose unions are their TWINS."""
    if name not in _union_fns:
        _union_fns[name] = ffi.cast(signature, ffi.addressof(lib, name))
    return _union_fns[name]


def grid_ref_fn():
    """``ghostty_terminal_grid_ref``, whose point is a union passed by value: every read
    of one cell, row or link through a grid reference goes through it."""
    return union_fn("ghostty_terminal_grid_ref",
                    "GhosttyResult(*)(GhosttyTerminal, GhosttyPointS, GhosttyGridRef*)")


class Terminal:
    """One ghostty terminal: the handle, freed once, and the reads the host makes."""

    def __init__(self, handle):
        self.handle = handle
        self._free = weakref.finalize(self, lib.ghostty_terminal_free, handle)

    @classmethod
    def new(cls, cols: int, rows: int, scrollback: int) -> "Terminal":
        out = ffi.new("GhosttyTerminal*")
        check(lib.ghostty_terminal_new(ffi.NULL, out, cols, rows), "terminal_new")
        term = cls(out[0])
        check(lib.ghostty_terminal_set(term.handle,
                                       lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_LINES,
                                       ffi.new("size_t*", scrollback)), "setting scrollback")
        return term

    def get(self, key: str, ctype: str = "uint16_t"):
        """One ``ghostty_terminal_get`` value (GHOSTTY_TERMINAL_DATA_<KEY>)."""
        out = ffi.new(ctype + "*")
        check(lib.ghostty_terminal_get(
            self.handle, getattr(lib, f"GHOSTTY_TERMINAL_DATA_{key.upper()}"), out),
            f"terminal_get {key}")
        return out[0]

    def mode(self, n: int, ansi: bool = False) -> bool:
        """Whether DEC private mode ``n`` (or ANSI mode, with ``ansi``) is set."""
        c = ffi.new("GhosttyTerminalModeConfig*")
        # ghostty_mode_new's packing (a static inline function: not in the library)
        c.mode = (n & 0x7FFF) | (int(ansi) << 15)
        check(lib.ghostty_terminal_get(self.handle, lib.GHOSTTY_TERMINAL_DATA_MODE, c),
              f"terminal_get mode {n}")
        return bool(c.value)

    @property
    def cursor(self) -> tuple:
        return self.get("cursor_x"), self.get("cursor_y")

    @property
    def size(self) -> tuple:
        return self.get("cols"), self.get("rows")

    def ref(self, x: int, y: int, tag: str = "active"):
        """A grid ref of (x, y) in ``tag``'s coordinates, valid until the next change."""
        fn = grid_ref_fn()
        pt = ffi.new("GhosttyPointS*")
        pt.tag = getattr(lib, f"GHOSTTY_POINT_TAG_{tag.upper()}")
        pt.value.x, pt.value.y = x, y
        ref = init_sized("GhosttyGridRef")
        check(fn(self.handle, pt[0], ref), f"grid_ref {tag} {x},{y}")
        return ref

    def close(self) -> None:
        """Free the terminal now (garbage collection would, otherwise)."""
        self._free()
