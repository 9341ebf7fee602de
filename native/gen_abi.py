#!/usr/bin/env python3
"""The C ABI's Python mirror: native/include/pycutlass_rt.h -> pycutlass_rt/_abi.py.

    python native/gen_abi.py            # rewrite pycutlass_rt/_abi.py from the header
    python native/gen_abi.py --check    # exit 1, printing a diff, when _abi.py is stale

The header is the one place the ABI is written down; the package reads its enums,
structs, constants and function signatures from the generated module only. The parser
knows this header's constructs and nothing more (no preprocessor, no libclang):

- ``#define NAME <integer>``; other #defines are skipped, ``#ifdef __cplusplus`` blocks
  too (the C view: no ``extern "C" {``), and every other conditional block is read
  through, not evaluated (the DLPack declarations inside ``#ifndef DLPACK_MAJOR_VERSION``
  are wanted);
- ``typedef enum { A = 1, B, ... } name;`` with integer values (or none: previous + 1);
- ``typedef struct { type a, *b; char s[N]; ... } name;`` of scalar, pointer and struct
  fields and one-dimensional arrays (N an integer or a #define), and
  ``typedef struct tag name;`` (opaque: reached through pointers only);
- ``typedef <type> name;`` aliases, such as ``typedef void pcr_py_object;``;
- ``typedef <type> (*name)(<params>);`` function pointers (callbacks the library calls);
- ``PCR_API <type> name(<params>);`` prototypes.

Anything else outside comments is an error, so a construct the mirror would miss cannot
slip in unnoticed.

Python names: a typedef loses ``pcr_`` and is CamelCased (``pcr_c_mode`` -> ``CMode``,
``pcr_problem`` -> ``Problem``; ``DLTensor`` stays), an enum constant loses ``PCR_`` or
``kDL`` (``PCR_C_COPIED`` -> ``CMode.C_COPIED``, ``kDLCUDA`` -> ``DLDeviceType.CUDA``), a
#define keeps its C name. Every enum becomes an ``IntEnum`` whose members have a
``token``: the name past the enum's common prefix, lowercased
(``Schedule.SCHED_COOP.token == "coop"``), the word kernel names use.

Functions: ``pcr_py_*`` are the Python-object entry points, bound through
``ctypes.PyDLL`` (the GIL stays held); ``pcr_py_object*`` arguments are ``py_object``.
A pointer to an opaque struct is ``c_void_p``; ``char*`` is ``c_char_p``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "include", "pycutlass_rt.h")
#: the package's private half of the ABI (the selector's tables), mirrored after HEADER
TABLES_HEADER = os.path.join(HERE, "include", "pycutlass_rt_tables.h")
OUTPUT = os.path.join(os.path.dirname(HERE), "pycutlass_rt", "_abi.py")

#: C scalar type -> ctypes name
SCALARS = {
    "int8_t": "c_int8",
    "uint8_t": "c_uint8",
    "int16_t": "c_int16",
    "uint16_t": "c_uint16",
    "int32_t": "c_int32",
    "uint32_t": "c_uint32",
    "int64_t": "c_int64",
    "uint64_t": "c_uint64",
    "int": "c_int",
    "unsigned": "c_uint",
    "long": "c_long",
    "size_t": "c_size_t",
    "float": "c_float",
    "double": "c_double",
    "char": "c_char",
}
#: typedefs of void whose pointers are PyObject* (bound as ctypes.py_object)
PY_OBJECT_TYPES = {"pcr_py_object"}
#: prefix of the functions bound through ctypes.PyDLL
PYTHON_PREFIX = "pcr_py_"
#: prefixes an enum constant's Python name drops
CONSTANT_PREFIXES = ("PCR_", "kDL")
#: what a prototype starts with
API = "PCR_API"


class HeaderError(ValueError):
    """A construct of the header this parser does not read."""


@dataclasses.dataclass(frozen=True)
class CType:
    """A declared type: its base name and how many pointers lead to it (const dropped)."""

    base: str
    depth: int = 0
    length: str = ""  # a struct field's array length: an integer or a #define'd name

    def __str__(self) -> str:
        return self.base + "*" * self.depth + (f"[{self.length}]" if self.length else "")


@dataclasses.dataclass
class Enum:
    """``typedef enum { ... } name;``."""

    name: str
    members: list  # [(C name, value)]


@dataclasses.dataclass
class Struct:
    """``typedef struct { ... } name;``, or an opaque ``typedef struct tag name;``."""

    name: str
    fields: list  # [(name, CType)]; empty for an opaque struct
    opaque: bool = False


@dataclasses.dataclass
class Function:
    """A ``PCR_API`` prototype."""

    name: str
    restype: CType
    params: list  # [(name, CType)]
    declared: list = dataclasses.field(default_factory=list)  # each parameter as written
    returns: str = ""  # the return type as written


@dataclasses.dataclass
class Abi:
    """Everything the header declares, in declaration order within each kind."""

    defines: dict = dataclasses.field(default_factory=dict)  # name -> int
    enums: list = dataclasses.field(default_factory=list)
    structs: list = dataclasses.field(default_factory=list)
    aliases: dict = dataclasses.field(default_factory=dict)  # name -> CType
    callbacks: list = dataclasses.field(default_factory=list)  # Function, one per typedef
    functions: list = dataclasses.field(default_factory=list)


# ---- parsing ----------------------------------------------------------------------------

_INT = r"[-+]?\s*(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*"


def _int(text: str) -> int:
    """The value of a C integer literal, parenthesized or signed (``(-1)``, ``0x10u``)."""
    text = re.sub(r"[uUlL]+$", "", text.strip().strip("()").replace(" ", ""))
    return int(text, 0)


def _strip_comments(text: str) -> str:
    """The text without comments; a block comment keeps its newlines (line numbers hold)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n") or " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _declaration(text: str) -> tuple:
    """(CType, name) of ``const DLTensor* const* a``; the name is None if absent."""
    tokens = re.findall(r"[A-Za-z_]\w*|\*|\S", text)
    words = [t for t in tokens if t != "const"]
    if any(not (t == "*" or re.fullmatch(r"[A-Za-z_]\w*", t)) for t in words):
        raise HeaderError(f"cannot read the declaration {text.strip()!r}")
    depth = words.count("*")
    names = [t for t in words if t != "*"]
    if len(names) >= 2 and words[-1] != "*":
        name, names = names[-1], names[:-1]
    else:
        name = None
    if not names:
        raise HeaderError(f"no type in {text.strip()!r}")
    return CType(" ".join(names), depth), name


def _statements(text: str):
    """Top-level statements (up to each ``;`` outside braces), whitespace collapsed."""
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            yield " ".join(text[start:i].split())
            start = i + 1
    rest = " ".join(text[start:].split())
    if rest:
        yield rest


def parse(text: str) -> Abi:
    """Reads a header's declarations.

    Args:
        text: the header's source.

    Returns:
        Abi: its #define'd integers, enums, structs, aliases and prototypes.

    Raises:
        HeaderError: a construct the parser does not read, or a malformed one.

    Example:
        >>> abi = parse("#define V 3\\ntypedef enum { X_A = 1, X_B } x_t;\\n"
        ...             "typedef struct { int32_t a, *b; char c[V]; } s_t;\\n"
        ...             "PCR_API int f(s_t* s);")
        >>> abi.defines, abi.enums[0].members, [str(t) for _, t in abi.structs[0].fields]
        ({'V': 3}, [('X_A', 1), ('X_B', 2)], ['int32_t', 'int32_t*', 'char[V]'])
        >>> [(name, str(t)) for name, t in abi.functions[0].params]
        [('s', 's_t*')]
    """
    abi = Abi()
    text = _strip_comments(text).replace("\\\n", " ")
    body, reading = [], []  # reading: per open conditional, whether its lines count
    for line in text.splitlines():
        directive = re.match(r"\s*#\s*(\w+)\s*(.*?)\s*$", line)
        if not directive:
            if all(reading):
                body.append(line)
            continue
        word, rest = directive.groups()
        if word in ("if", "ifdef", "ifndef"):
            reading.append(not (word == "ifdef" and rest == "__cplusplus"))
        elif word in ("else", "elif") and reading:
            reading[-1] = reading[-1] or word == "else"  # a __cplusplus block's #else counts
        elif word == "endif" and reading:
            reading.pop()
        elif word == "define" and all(reading):
            m = re.fullmatch(rf"(\w+)\s+(\(?\s*{_INT}\s*\)?)", rest)
            if m:
                abi.defines[m[1]] = _int(m[2])
    for stmt in _statements("\n".join(body)):
        _statement(stmt, abi)
    return abi


def _statement(stmt: str, abi: Abi) -> None:
    """Adds one top-level declaration to ``abi``; HeaderError if it is none this reads."""
    m = re.fullmatch(r"typedef enum(?: \w+)? ?\{(.*)\} ?(\w+)", stmt)
    if m:
        members, value = [], -1
        for item in filter(None, (x.strip() for x in m[1].split(","))):
            e = re.fullmatch(rf"([A-Za-z_]\w*)(?: ?= ?({_INT}|\({_INT}\)))?", item)
            if not e:
                raise HeaderError(f"enum {m[2]}: cannot read {item!r} (integer values only)")
            value = _int(e[2]) if e[2] else value + 1
            members.append((e[1], value))
        abi.enums.append(Enum(m[2], members))
        return
    m = re.fullmatch(r"typedef struct(?: \w+)? ?\{(.*)\} ?(\w+)", stmt)
    if m:
        fields = []
        for decl in filter(None, (x.strip() for x in m[1].split(";"))):
            array = re.fullmatch(r"([^\[\],]+?)\s*\[\s*(\w+)\s*\]", decl)
            if array:  # `char reason[PCR_REASON_SIZE]`: one array of fixed length
                ctype, name = _declaration(array[1])
                if name is None or not (array[2].isdigit() or array[2] in abi.defines):
                    raise HeaderError(f"struct {m[2]}: cannot read {decl!r}")
                fields.append((name, dataclasses.replace(ctype, length=array[2])))
                continue
            if re.search(r"[\[\](){}:]", decl):
                raise HeaderError(
                    f"struct {m[2]}: cannot read {decl!r} (arrays of more than one "
                    "declarator or dimension, bit fields, function pointers and nested "
                    "definitions are not read)"
                )
            first, *more = decl.split(",")
            ctype, name = _declaration(first)
            if name is None:
                raise HeaderError(f"struct {m[2]}: unnamed field in {decl!r}")
            fields.append((name, ctype))
            for extra in more:  # `int32_t a, *b`: the type without the first's pointers
                d = re.fullmatch(r"\s*(\**)\s*([A-Za-z_]\w*)\s*", extra)
                if not d:
                    raise HeaderError(f"struct {m[2]}: cannot read {decl!r}")
                fields.append((d[2], CType(ctype.base, len(d[1]))))
        abi.structs.append(Struct(m[2], fields))
        return
    m = re.fullmatch(r"typedef struct (\w+) (\w+)", stmt)
    if m:
        abi.structs.append(Struct(m[2], [], opaque=True))
        return
    m = re.fullmatch(r"typedef ([\w\s\*]+?) ?\(\*(\w+)\)\((.*)\)", stmt)
    if m:
        abi.callbacks.append(_function(m[2], m[1] + " " + m[2], m[3]))
        return
    m = re.fullmatch(r"typedef ([\w\s\*]+?) ?(\w+)", stmt)
    if m:
        abi.aliases[m[2]] = _declaration(m[1] + " _")[0]
        return
    m = re.fullmatch(rf"{API} (.+?)\((.*)\)", stmt)
    if m:
        name = _declaration(m[1])[1]
        if name is None:
            raise HeaderError(f"no function name in {stmt!r}")
        abi.functions.append(_function(name, m[1], m[2]))
        return
    raise HeaderError(f"unrecognized declaration: {stmt[:120]!r}")


def _function(name: str, head: str, params: str) -> Function:
    """A prototype's (or a function pointer's) Function: ``head`` is its return type and
    name as written, ``params`` its parameter list."""
    restype = _declaration(head)[0]
    declared = [x.strip() for x in params.split(",")] if params.strip() else ["void"]
    typed = []
    if declared != ["void"]:
        for i, param in enumerate(declared):
            ctype, pname = _declaration(param)
            typed.append((pname or f"arg{i}", ctype))
    return Function(name, restype, typed, declared, head[: head.rfind(name)].strip())


# ---- Python names and ctypes ------------------------------------------------------------


def class_name(typedef: str) -> str:
    """``pcr_c_mode`` -> ``CMode``; names without ``pcr_`` (DLPack's) are kept."""
    if not typedef.startswith("pcr_"):
        return typedef
    return "".join(part.capitalize() for part in typedef[4:].split("_"))


def member_name(constant: str) -> str:
    """``PCR_C_COPIED`` -> ``C_COPIED``, ``kDLCUDA`` -> ``CUDA``."""
    for prefix in CONSTANT_PREFIXES:
        if constant.startswith(prefix) and constant[len(prefix) :][:1].isalpha():
            return constant[len(prefix) :]
    return constant


def token_prefix(names) -> str:
    """The members' common prefix, up to and including its last ``_``."""
    common = os.path.commonprefix(list(names))
    return common[: common.rfind("_") + 1]


class _Types:
    """Resolves declared types to ctypes expressions, and collects the ctypes names used."""

    def __init__(self, abi: Abi):
        self.abi = abi
        self.enums = {e.name for e in abi.enums}
        self.structs = {s.name: s for s in abi.structs}
        self.callbacks = {c.name for c in abi.callbacks}
        self.used: set = set()

    def _name(self, name: str) -> str:
        """A name from ctypes, noted for the generated module's import."""
        self.used.add(name)
        return name

    def ctypes(self, t: CType, where: str) -> str:
        """The ctypes expression for ``t``.

        Args:
            t: a declared type.
            where: the declaration it came from, for errors.

        Returns:
            str: e.g. ``POINTER(DLTensor)``, ``c_void_p``, or ``None`` (void).

        Raises:
            HeaderError: a type the mirror cannot express (an opaque struct by value).
        """
        if t.length:  # a fixed-length array field
            return f"{self.ctypes(dataclasses.replace(t, length=''), where)} * {t.length}"
        base = t.base
        while base in self.abi.aliases and base not in PY_OBJECT_TYPES:
            alias = self.abi.aliases[base]
            base, t = alias.base, CType(alias.base, alias.depth + t.depth)
        if t.depth == 0:
            if base == "void":
                return "None"
            if base in SCALARS:
                return self._name(SCALARS[base])
            if base in self.enums:
                return self._name("c_int")  # a C enum is an int
            if base in self.structs and not self.structs[base].opaque:
                return class_name(base)
            if base in self.callbacks:
                return class_name(base)
            raise HeaderError(f"{where}: {base} cannot be passed or stored by value")
        if t.depth == 1:
            if base in PY_OBJECT_TYPES:
                return self._name("py_object")
            if base == "char":
                return self._name("c_char_p")
            if base == "void" or (base in self.structs and self.structs[base].opaque):
                return self._name("c_void_p")
        inner = CType(base, t.depth - 1)
        if inner.depth == 0 and base in PY_OBJECT_TYPES | {"void"}:
            raise HeaderError(f"{where}: {base} is not a value")
        return f"{self._name('POINTER')}({self.ctypes(inner, where)})"


# ---- writing ----------------------------------------------------------------------------

BANNER = (
    "# generated by native/gen_abi.py from native/include/pycutlass_rt.h and "
    "pycutlass_rt_tables.h \N{EM DASH} "
    "do not edit.\n# Regenerate: python native/gen_abi.py (CI runs it with --check).\n"
)

PREAMBLE = '''"""The C ABI of libpycutlass_rt.so (native/include/pycutlass_rt.h, then the package's
private pycutlass_rt_tables.h), for ctypes.

Enums are IntEnums named after their typedef without ``pcr_`` (``pcr_c_mode`` ->
``CMode``), with the C constants' names without ``PCR_`` (``PCR_C_COPIED`` ->
``CMode.C_COPIED``); a member's ``token`` is its name past the enum's common prefix,
lowercased (``Schedule.SCHED_COOP.token == "coop"``), the word kernel names use. Structs
are ctypes Structures (``pcr_problem`` -> ``Problem``), #define'd integers keep their C
names, and FUNCTIONS holds every exported function's ctypes signature.
"""
from __future__ import annotations

import enum
{ctypes_import}
from typing import NamedTuple


class AbiEnum(enum.IntEnum):
    """An enum of the C ABI."""

    @property
    def token(self) -> str:
        """The member's name past its enum's common prefix, lowercased."""
        return self.name[len(_TOKEN_PREFIXES[type(self).__name__]):].lower()

    @classmethod
    def from_token(cls, token: str) -> AbiEnum:
        """The member whose ``token`` is ``token``; ValueError if there is none."""
        by_token = _BY_TOKEN.get(cls)
        if by_token is None:  # built on first use: selection decodes every kernel's tokens
            by_token = _BY_TOKEN[cls] = {{member.token: member for member in cls}}
        try:
            return by_token[token]
        except KeyError:
            raise ValueError(f"{{token!r}} is not a {{cls.__name__}} token: "
                             f"{{', '.join(by_token)}}") from None


_BY_TOKEN: dict = {{}}  # enum class -> {{token: member}}


class Function(NamedTuple):
    """An exported function's ctypes signature, and how it is bound."""

    restype: object
    argtypes: tuple
    #: a Python-object entry point (pcr_py_*): bound through ctypes.PyDLL, the GIL held
    python: bool
'''


def _wrap(head: str, items: list, tail: str, indent: str, width: int = 100) -> list:
    """``head + ", ".join(items) + tail`` as lines of at most ``width`` where it can."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if len(line) + len(piece.rstrip()) > width and line.strip() not in ("", head.strip()):
            lines.append(line.rstrip())
            line = indent
        line += piece
    if not items:
        line += tail
    lines.append(line.rstrip())
    return lines


def render(abi: Abi) -> str:
    """The text of pycutlass_rt/_abi.py for ``abi``."""
    types = _Types(abi)
    pythons = [class_name(t.name) for t in abi.enums + [s for s in abi.structs if not s.opaque]]
    twice = sorted({n for n in pythons if pythons.count(n) > 1})
    if twice:
        raise HeaderError(f"typedefs that would share a Python name: {twice}")
    out = ["", ""]
    for name, value in abi.defines.items():
        out.append(f"{name} = {value}")
    prefixes = {}
    for e in abi.enums:
        cls = class_name(e.name)
        names = [member_name(c) for c, _ in e.members]
        bad = [n for n in names if not n.isidentifier()]
        if bad:
            raise HeaderError(f"enum {e.name}: {bad} are not Python names")
        prefixes[cls] = token_prefix(names)
        out += ["", "", f"class {cls}(AbiEnum):", f'    """The header\'s {e.name}."""', ""]
        out += [f"    {n} = {v}" for n, (_, v) in zip(names, e.members)]
    out += ["", "", "#: each enum's common member prefix, which ``AbiEnum.token`` drops"]
    out += _wrap(
        "_TOKEN_PREFIXES = {",
        [f'"{c}": "{p}"' for c, p in prefixes.items()],
        "}",
        " " * len("_TOKEN_PREFIXES = {"),
    )
    for s in abi.structs:
        if s.opaque:
            continue
        fields = [f'("{n}", {types.ctypes(t, f"{s.name}.{n}")})' for n, t in s.fields]
        types.used.add("Structure")
        out += [
            "",
            "",
            f"class {class_name(s.name)}(Structure):",
            f'    """The header\'s {s.name}."""',
            "",
        ]
        out += _wrap("    _fields_ = [", fields, "]", " " * len("    _fields_ = ["))
    for cb in abi.callbacks:
        types.used.add("CFUNCTYPE")
        restype = types.ctypes(cb.restype, cb.name)
        args = [types.ctypes(t, f"{cb.name}({n})") for n, t in cb.params]
        out += ["", "", f"#: the header's {cb.name}: a callback the library calls"]
        head = f"{class_name(cb.name)} = CFUNCTYPE("
        out += _wrap(head, [restype, *args], ")", " " * len(head))
    out += ["", "", "#: name -> signature of every function the library exports"]
    out.append("FUNCTIONS = {")
    for f in abi.functions:
        out += _wrap(f"    # {f.returns} {f.name}(", f.declared, ")", "    #     ")
        restype = types.ctypes(f.restype, f.name)
        args = [types.ctypes(t, f"{f.name}({n})") for n, t in f.params]
        python = f.name.startswith(PYTHON_PREFIX)
        head = f'    "{f.name}": Function({restype}, ('
        tail = f"{',' if len(args) == 1 else ''}), {python}),"
        out += _wrap(head, args, tail, " " * len(head))
    out.append("}")
    names = sorted(types.used)
    imports = _wrap("from ctypes import ", names, "", "")
    if len(imports) > 1:  # parenthesized over several lines
        imports = _wrap("from ctypes import (", names, ")", " " * len("from ctypes import ("))
    return BANNER + PREAMBLE.format(ctypes_import="\n".join(imports)) + "\n".join(out) + "\n"


def generate(header: str = HEADER, tables: str | None = TABLES_HEADER) -> str:
    """The text of pycutlass_rt/_abi.py for the header at ``header`` followed by the one at
    ``tables`` (None: none): one mirror, in declaration order."""
    texts = []
    for path in (header, tables):
        if path is not None:
            with open(path) as f:
                texts.append(f.read())
    return render(parse("\n".join(texts)))


def main(argv=None) -> int:
    """Writes (or with --check, compares) the mirror; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--header", default=HEADER, help="the C header (default: %(default)s)")
    ap.add_argument(
        "--tables",
        default=None,
        help=f"the private header mirrored after it (default: {TABLES_HEADER} with the "
        "default --header, none with another)",
    )
    ap.add_argument("--out", default=OUTPUT, help="the module to write (default: %(default)s)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff if --out differs from the header's",
    )
    args = ap.parse_args(argv)
    tables = args.tables or (TABLES_HEADER if args.header == HEADER else None)
    text = generate(args.header, tables)
    try:
        with open(args.out) as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if args.check:
        if current == text:
            return 0
        rel = os.path.relpath(args.out)
        sys.stdout.writelines(
            difflib.unified_diff(
                (current or "").splitlines(True),
                text.splitlines(True),
                f"{rel} (as it is)",
                f"{rel} (from {os.path.relpath(args.header)})",
            )
        )
        print(f"{rel} is stale: run python {os.path.relpath(__file__)}", file=sys.stderr)
        return 1
    if current != text:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
