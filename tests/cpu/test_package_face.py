"""The package's face only hands names on, and no module below it imports it back: each
entry point lives in a module named for its job, and modules import those modules."""

import ast
import pathlib
import subprocess
import sys

import pycutlass_rt as pcr

PACKAGE = pathlib.Path(pcr.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))


def _module_names() -> set:
    """Every module and subpackage of pycutlass_rt, dotted ("pycutlass_rt._gemm")."""
    out = set()
    for path in MODULES:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_the_face_defines_nothing():
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Import", "Assign"}, kinds
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets}
    assert assigned == {"__all__"}
    docstring, *imports = [n for n in tree.body if not isinstance(n, ast.Assign)]
    assert isinstance(docstring.value, ast.Constant)  # the module docstring
    assert all(isinstance(n, ast.ImportFrom) for n in imports)


def test_every_public_name_comes_from_a_room():
    for name in pcr.__all__:
        obj = getattr(pcr, name)
        assert obj.__module__ != "pycutlass_rt", name
    assert pcr.gemm.__module__ == "pycutlass_rt._gemm"
    assert pcr.info.__module__ == "pycutlass_rt._info"
    assert pcr.gemm.__doc__.startswith("Computes ``d = act(alpha * a @ b")


def test_no_module_imports_the_face():
    """``from . import x`` and ``from .. import x`` name modules only, and nothing imports
    ``pycutlass_rt`` itself or a name from it."""
    modules = _module_names()
    for path in MODULES:
        if path == PACKAGE / "__init__.py":
            continue
        package = ".".join(path.relative_to(PACKAGE.parent).parent.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PACKAGE.parent)}:{node.__dict__.get('lineno')}"
            if isinstance(node, ast.Import):
                assert all(a.name != "pycutlass_rt" for a in node.names), where
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = ".".join([base, node.module] if node.module else [base])
                else:
                    base = node.module
                if base == "pycutlass_rt":
                    for alias in node.names:
                        assert f"{base}.{alias.name}" in modules, f"{where}: {alias.name}"


def test_importing_the_package_stays_cheap():
    code = (
        "import sys, pycutlass_rt\n"
        "heavy = {'torch', 'jax', 'numpy', 'cupy', 'importlib.metadata', 'pycutlass_rt._doctor'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
