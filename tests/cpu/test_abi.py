"""The generated ABI mirror (pycutlass_rt/_abi.py): current, faithful to the C layout, bound
as the header says, and the one vocabulary of kernel names and KernelInfo."""

import ctypes
import doctest
import os
import shutil
import subprocess
import sys

import catalog
import gen_abi
import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _abi, _lib, errors

GEN = os.path.abspath(gen_abi.__file__)

SNIPPET = r"""
/* a header in the style of pycutlass_rt.h */
#ifndef X_H_
#define X_H_
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define X_VERSION 7
#define X_NEGATIVE (-1)
#define X_API __attribute__((visibility("default")))
typedef enum { PCR_MODE_OFF = 0, PCR_MODE_ON, PCR_MODE_AUTO = 4 } pcr_mode; /* trailing */
typedef struct { uint8_t code; uint16_t lanes; } pcr_inner;
typedef struct {
  const char* name;            /* a string */
  int32_t a, *b;               // two declarators, one a pointer
  pcr_inner inner;
  int64_t* shape;
} pcr_thing;
typedef struct pcr_handle pcr_handle;
typedef void pcr_py_object;
PCR_API int pcr_make(const pcr_thing* const* things, int32_t count, pcr_handle** out);
PCR_API const char* pcr_name(void);
PCR_API void pcr_py_call(pcr_handle* h, pcr_py_object* obj, pcr_py_object** objs,
                         void* stream);
#ifdef __cplusplus
}
#endif
#endif
"""


def run_gen(*args):
    return subprocess.run([sys.executable, GEN, *args], capture_output=True, text=True)


def load_module(text, tmp_path, name="abi_snippet"):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    namespace = {}
    exec(compile(text, str(path), "exec"), namespace)  # noqa: S102  (our own generated text)
    return namespace


# ---- the generator ----------------------------------------------------------------------


def test_generator_parses_a_header_snippet():
    abi = gen_abi.parse(SNIPPET)
    assert abi.defines == {"X_VERSION": 7, "X_NEGATIVE": -1}
    (mode,) = abi.enums
    assert mode.name == "pcr_mode"
    assert mode.members == [("PCR_MODE_OFF", 0), ("PCR_MODE_ON", 1), ("PCR_MODE_AUTO", 4)]
    inner, thing, handle = abi.structs
    assert thing.fields == [
        ("name", gen_abi.CType("char", 1)),
        ("a", gen_abi.CType("int32_t")),
        ("b", gen_abi.CType("int32_t", 1)),
        ("inner", gen_abi.CType("pcr_inner")),
        ("shape", gen_abi.CType("int64_t", 1)),
    ]
    assert handle.opaque and abi.aliases == {"pcr_py_object": gen_abi.CType("void")}
    assert [(f.name, str(f.restype), [str(t) for _, t in f.params]) for f in abi.functions] == [
        ("pcr_make", "int", ["pcr_thing**", "int32_t", "pcr_handle**"]),
        ("pcr_name", "char*", []),
        ("pcr_py_call", "void", ["pcr_handle*", "pcr_py_object*", "pcr_py_object**", "void*"]),
    ]


def test_generated_snippet_module(tmp_path):
    ns = load_module(gen_abi.render(gen_abi.parse(SNIPPET)), tmp_path)
    Mode, Thing, Inner = ns["Mode"], ns["Thing"], ns["Inner"]
    assert ns["X_VERSION"] == 7 and ns["X_NEGATIVE"] == -1
    assert [(m.name, int(m), m.token) for m in Mode] == [
        ("MODE_OFF", 0, "off"),
        ("MODE_ON", 1, "on"),
        ("MODE_AUTO", 4, "auto"),
    ]
    assert Mode.from_token("auto") is Mode.MODE_AUTO
    with pytest.raises(ValueError, match="'nope' is not a Mode token: off, on, auto"):
        Mode.from_token("nope")
    assert [(n, t) for n, t in Thing._fields_] == [
        ("name", ctypes.c_char_p),
        ("a", ctypes.c_int32),
        ("b", ctypes.POINTER(ctypes.c_int32)),
        ("inner", Inner),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
    ]
    make, name, call = (ns["FUNCTIONS"][f] for f in ("pcr_make", "pcr_name", "pcr_py_call"))
    assert make.restype is ctypes.c_int and not make.python
    assert make.argtypes[0]._type_._type_ is Thing  # const pcr_thing* const*
    assert make.argtypes[1:] == (ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))  # opaque**
    assert name == (ctypes.c_char_p, (), False)
    # pcr_py_*: through PyDLL, pcr_py_object* as py_object, other pointers as they are
    assert call == (
        None,
        (ctypes.c_void_p, ctypes.py_object, ctypes.POINTER(ctypes.py_object), ctypes.c_void_p),
        True,
    )


@pytest.mark.parametrize(
    "snippet, why",
    [
        ("typedef union { int a; float b; } u;", "unrecognized declaration"),
        ("typedef struct { int32_t a[4][2]; } s;", "arrays of more than one"),
        ("typedef struct { char s[UNDEFINED]; } s;", "cannot read"),
        ("typedef enum { A = 1 << 2 } e;", "integer values only"),
        ("int32_t global_counter;", "unrecognized declaration"),
    ],
)
def test_generator_refuses_what_it_cannot_mirror(snippet, why):
    with pytest.raises(gen_abi.HeaderError, match=why):
        gen_abi.parse(snippet)


def test_generator_doctests():
    assert doctest.testmod(gen_abi).failed == 0


def test_mirror_is_current():
    """CI runs the same check (.ci/run): _abi.py is what the header generates."""
    r = run_gen("--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_reports_a_stale_mirror_with_a_diff(tmp_path):
    header, out = tmp_path / "x.h", tmp_path / "x_abi.py"
    header.write_text(SNIPPET)
    assert run_gen("--header", str(header), "--out", str(out)).returncode == 0
    assert out.read_text().startswith("# generated by native/gen_abi.py")
    assert "do not edit" in out.read_text().splitlines()[0]
    assert run_gen("--header", str(header), "--out", str(out), "--check").returncode == 0
    header.write_text(SNIPPET.replace("PCR_MODE_AUTO = 4", "PCR_MODE_AUTO = 5"))
    r = run_gen("--header", str(header), "--out", str(out), "--check")
    assert r.returncode == 1 and "-    MODE_AUTO = 4\n+    MODE_AUTO = 5" in r.stdout
    assert "is stale" in r.stderr
    assert "MODE_AUTO = 4" in out.read_text()  # --check writes nothing
    out.unlink()
    assert run_gen("--header", str(header), "--out", str(out), "--check").returncode == 1


# ---- the mirror against the header, the compiler and the library -------------------------


def test_status_codes_and_errors():
    assert _abi.Status.OK == 0 and "NEED_SELECTION" not in _abi.Status.__members__
    assert _abi.Status.ERR_INVALID_ARGUMENT == errors.ERR_INVALID_ARGUMENT == 1
    # every exception class carries its status as a member of the generated enum
    for status, cls in errors._BY_STATUS.items():
        assert isinstance(status, _abi.Status) and cls.status is status
        assert isinstance(errors.from_status(int(status), "m"), cls)
    assert type(errors.from_status(_abi.Status.ERR_INTERNAL, "m")) is errors.Error


C_LAYOUT = """#include <stddef.h>
#include <stdio.h>
#include "pycutlass_rt_tables.h"
int main(void) {
%s  return 0;
}
"""


def test_structs_have_the_c_compilers_layout(tmp_path):
    """sizeof and every offsetof of the header's structs, as cc lays them out."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    headers = (gen_abi.HEADER, gen_abi.TABLES_HEADER)
    abi = gen_abi.parse("\n".join(open(h).read() for h in headers))
    lines, expect = [], []
    for s in (s for s in abi.structs if not s.opaque):
        cls = getattr(_abi, gen_abi.class_name(s.name))
        lines.append(f'  printf("%zu\\n", sizeof({s.name}));\n')
        expect.append(ctypes.sizeof(cls))
        for field, _ in s.fields:
            lines.append(f'  printf("%zu\\n", offsetof({s.name}, {field}));\n')
            expect.append(getattr(cls, field).offset)
    (tmp_path / "layout.c").write_text(C_LAYOUT % "".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-I",
            os.path.dirname(gen_abi.HEADER),
            "-o",
            str(exe),
            str(tmp_path / "layout.c"),
        ],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert [int(x) for x in out.split()] == expect
    assert ctypes.sizeof(_abi.Problem) == 216 and ctypes.sizeof(_abi.KernelDesc) == 136


def test_library_is_bound_from_the_mirror(lib):
    assert lib.pcr_abi_version() == _abi.PCR_ABI_VERSION == _lib.ABI_VERSION
    for name, fn in _abi.FUNCTIONS.items():
        bound = getattr(lib, name)
        # Python-object entry points keep the GIL (PyDLL); the rest release it (CDLL)
        assert (
            bool(bound._flags_ & ctypes._FUNCFLAG_PYTHONAPI)
            == fn.python
            == name.startswith("pcr_py_")
        ), name
        assert tuple(bound.argtypes) == fn.argtypes and bound.restype is fn.restype, name


# ---- one vocabulary ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "words, enum",
    [
        (catalog.SCHEDULES, _abi.Schedule),
        (catalog.EPILOGUES, _abi.Epilogue),
        ({w: v[0] for w, v in catalog.SPLITS.items()}, _abi.Split),
    ],
)
def test_kernel_name_words_are_the_enum_tokens(words, enum):
    """The catalogue names kernels with the words of the C constants it emits."""
    assert {enum[gen_abi.member_name(c)].token: w for w, c in words.items()} == {
        w: w for w in words
    }
    assert set(words) == {m.token for m in enum}


def test_every_constant_the_catalogue_emits_is_declared():
    declared = {c for e in gen_abi.parse(open(gen_abi.HEADER).read()).enums for c, _ in e.members}
    emitted = {v[1] for v in catalog.DTYPES.values()} | {v[1] for v in catalog.LAYOUTS.values()}
    assert emitted <= declared
    assert {v[1]: k for k, v in catalog.DTYPES.items()} == {
        f"PCR_{d.name}": d.token for d in _abi.Dtype if d.token in catalog.DTYPES
    }


def test_the_model_knows_every_schedule(lib):
    """Each pcr_schedule has its own mainloop efficiency, none the unknown code's default."""
    import ctypes

    from pycutlass_rt._kernels import desc_of

    def compute_us(schedule: int) -> float:
        desc, out = _abi.KernelDesc(), _abi.Model()
        ctypes.pointer(desc)[0] = desc_of(pcr.kernels()[0])
        desc.schedule = schedule
        lib.check(
            lib.pcr_model_terms(ctypes.byref(desc), 4096, 4096, 4096, 1, 132, 90, ctypes.byref(out))
        )
        return out.compute_us

    unknown = compute_us(max(_abi.Schedule) + 1)
    assert all(compute_us(s) != unknown for s in _abi.Schedule)


def test_kernel_info_holds_the_words_of_the_name(lib):
    for k in pcr.kernels():
        words = k.name.split("_")
        if k.family in (90, 100):
            assert k.schedule in words, k
        assert (k.split in words) != (k.split == "none"), k
        assert (k.epilogue in words) != (k.epilogue == "linear"), k
        assert k.base_name == "_".join(w for w in words if w != k.epilogue)
