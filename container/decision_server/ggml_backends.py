"""Which llama.cpp kernels run here: ggml's backends, loaded from llama-cpp-python's own folder.

The project builds llama-cpp-python with ggml's runtime CPU dispatch (`GGML_BACKEND_DL` and
`GGML_CPU_ALL_VARIANTS`, as the llama.cpp DLC does; see container/llama-build.sh): the CPU backend
is one shared library per microarchitecture (`libggml-cpu-haswell.so` … `-sapphirerapids.so`).
`load()` scores them with ggml's own score function and loads the best this CPU supports, so one
build runs its AVX-512 kernels on an AVX-512 machine and its AVX2 kernels on an AVX2 one, and
never an instruction the CPU lacks. The AMX variant is opt-in (`OPT_IN_VARIANTS` says why).

llama.cpp's own loader (`llama_backend_init`) searches the executable's folder and the working
directory, which for Python are /usr/bin and wherever the server started: it would find nothing.
So `load()` runs before anything else calls llama.cpp. A build with the backends linked in (no
dynamic loading) has them registered already; `load()` then only reports what is there.
"""

from __future__ import annotations

import _ctypes
import ctypes
import re
import threading
from pathlib import Path

import llama_cpp
from pydantic import BaseModel, Field

LIB_DIR = Path(llama_cpp.__file__).resolve().parent / "lib"
#: A CPU variant's file: libggml-cpu-<variant>.so
_VARIANT_FILE = re.compile(r"libggml-cpu-(?P<variant>[A-Za-z0-9_.]+)\.so$")
_GGML_FILE = re.compile(r"/libggml\.so(\.\d+)*$")
#: Variants ggml would score highest that load only when DECISION_CPU_VARIANT names them. AMX
#: (sapphirerapids): ggml's AMX matrix kernels died with SIGILL at their first `tileloadd` on an
#: AMX-capable Xeon VM where a plain C program requesting the tile permission ran the instruction
#: fine; the next variant down keeps every AVX-512 kernel (BF16, VNNI, VBMI).
OPT_IN_VARIANTS = ("sapphirerapids",)
#: The GPU backends the images build, loaded (where the build has them) beside the CPU variant.
_GPU_BACKENDS = ("cuda",)


class BackendError(RuntimeError):
    """The requested CPU variant cannot be loaded here; the message says why and what can."""


class LlamaBuild(BaseModel):
    """What computes the decisions: reported by /ping and the benchmark beside every figure."""

    dynamic_backends: bool = Field(description="The backends are loaded at run time (GGML_BACKEND_DL), not linked in.")
    cpu_variant: str = Field(
        description="The CPU backend library in use (`haswell`, `icelake`, `sapphirerapids`, …); "
        "`built-in` for a build with the CPU backend linked in.")
    cpu_variants_available: list[str] = Field(description="Every CPU variant this build ships.")
    chosen_by: str = Field(description="`score`: the best variant for this CPU by ggml's score; `setting`: DECISION_CPU_VARIANT.")
    cpu_features: list[str] = Field(description="Instruction-set features the CPU backend in use was compiled for.")
    backends: list[str] = Field(description="Every backend registered (CPU, CUDA, …).")
    system_info: str = Field(description="llama.cpp's own llama_print_system_info().")


_lock = threading.Lock()
_loaded: LlamaBuild | None = None


class _Feature(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


def _ggml() -> ctypes.CDLL:
    # The very file libllama loaded: the wheel holds libggml.so, .so.0 and .so.0.x as copies, not
    # links, and a copy opened by another name would be a second ggml with a registry of its own.
    mapped = [Path(line.split()[-1]) for line in _maps().splitlines() if _GGML_FILE.search(line.strip())]
    lib = ctypes.CDLL(str(mapped[0] if mapped else LIB_DIR / "libggml.so"))
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_name.restype = ctypes.c_char_p
    lib.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    lib.ggml_backend_load.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load.restype = ctypes.c_void_p
    return lib


def available_variants(lib_dir: Path = LIB_DIR) -> list[str]:
    return sorted(m["variant"] for p in lib_dir.glob("libggml-cpu-*.so") if (m := _VARIANT_FILE.search(p.name)))


def load(cpu_variant: str | None = None) -> LlamaBuild:
    """Register ggml's backends once per process (idempotent) and say which CPU variant runs.

    cpu_variant None loads the variant ggml scores best on this CPU (opt-in ones left out);
    a name loads that variant (a side-by-side benchmark, AMX, or stepping around a bad one).
    """
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load(cpu_variant)
        elif cpu_variant is not None and cpu_variant != _loaded.cpu_variant:
            raise BackendError(f"DECISION_CPU_VARIANT={cpu_variant}, but this process already runs the "
                               f"{_loaded.cpu_variant} CPU backend; a process loads one")
        return _loaded


def _load(cpu_variant: str | None) -> LlamaBuild:
    lib = _ggml()
    variants = available_variants()
    dynamic = lib.ggml_backend_reg_count() == 0
    if not dynamic:
        if cpu_variant is not None:
            raise BackendError(f"DECISION_CPU_VARIANT={cpu_variant}, but this llama-cpp-python build links its CPU "
                               "backend in and has no variants to choose from (build it with container/llama-build.sh)")
    else:
        if cpu_variant is not None and cpu_variant not in variants:
            raise BackendError(f"DECISION_CPU_VARIANT={cpu_variant} is not among this build's CPU variants: "
                               f"{', '.join(variants) or 'none'}")
        chosen = cpu_variant or best_variant(variants)
        for gpu in _GPU_BACKENDS:
            if (LIB_DIR / f"libggml-{gpu}.so").exists():
                lib.ggml_backend_load(str(LIB_DIR / f"libggml-{gpu}.so").encode())
        if not lib.ggml_backend_load(str(_variant_path(chosen)).encode()):
            why = (f"DECISION_CPU_VARIANT={chosen}: this CPU lacks an instruction that variant needs (ggml scores "
                   "it 0); leave the setting unset to get the best variant it supports") if cpu_variant else \
                f"ggml could not load the {chosen} CPU variant from {LIB_DIR}, the best this CPU scored"
            raise BackendError(why)
    cpu = lib.ggml_backend_reg_by_name(b"CPU")
    if not cpu:
        raise BackendError(f"no CPU backend could be loaded from {LIB_DIR} (variants there: {', '.join(variants) or 'none'})")
    backends = [lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode() for i in range(lib.ggml_backend_reg_count())]
    return LlamaBuild(
        dynamic_backends=dynamic,
        cpu_variant=chosen if dynamic else "built-in",
        cpu_variants_available=variants,
        chosen_by="setting" if cpu_variant else "score",
        cpu_features=_features(lib, cpu),
        backends=backends,
        system_info=llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
    )


def _variant_path(variant: str) -> Path:
    return LIB_DIR / f"libggml-cpu-{variant}.so"


def variant_score(variant: str) -> int:
    """ggml's own score of a variant on this CPU: 0 where the CPU lacks one of its instructions,
    higher for more of them (the function ggml's loader calls; the library is closed again)."""
    library = ctypes.CDLL(str(_variant_path(variant)))
    try:
        library.ggml_backend_score.restype = ctypes.c_int
        return int(library.ggml_backend_score())
    finally:
        _ctypes.dlclose(library._handle)


def best_variant(variants: list[str]) -> str:
    """The highest-scoring variant this CPU supports, leaving out the opt-in ones."""
    scores = {v: variant_score(v) for v in variants if v not in OPT_IN_VARIANTS}
    best = max(scores, key=lambda v: scores[v], default=None)
    if best is None or scores[best] == 0:
        raise BackendError(f"none of this build's CPU variants runs on this CPU ({', '.join(variants) or 'none found'} "
                           f"in {LIB_DIR})")
    return best


def _features(lib: ctypes.CDLL, reg: int) -> list[str]:
    address = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
    if not address:
        return []
    get_features = ctypes.CFUNCTYPE(ctypes.POINTER(_Feature), ctypes.c_void_p)(address)
    features, entry = [], get_features(reg)
    index = 0
    while entry[index].name:
        name, value = entry[index].name.decode(), entry[index].value.decode()
        features.append(name if value == "1" else f"{name}={value}")
        index += 1
    return features


def _maps() -> str:
    """The files this process has mapped (Linux); empty elsewhere."""
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""
