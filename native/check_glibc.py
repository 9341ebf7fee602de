"""The post-link check of CMakeLists.txt: the library must need no glibc symbol version newer
than the maximum (``PYCUTLASS_RT_MAX_GLIBC``, 2.28: manylinux_2_28, RHEL 8). A toolchain that
brings new references (the static libstdc++, cudart) fails the build here, naming the symbols,
instead of silently raising the glibc the wheel needs; native/src/glibc_compat.cpp is where a
new symbol gets its older version.

    python native/check_glibc.py OBJDUMP LIBRARY MAX_VERSION
"""

from __future__ import annotations

import re
import subprocess
import sys

# objdump -T: "... (GLIBC_2.34) pthread_create" (older binutils print it without parentheses)
VERSIONED = re.compile(r"\(?GLIBC_([0-9.]+|PRIVATE)\)?\s+(\S+)$", re.M)


def _version(text):
    """2.28 -> (2, 28); PRIVATE sorts after every number."""
    return (1,) if text == "PRIVATE" else (0, *(int(part) for part in text.split(".")))


def too_new(objdump_output, maximum):
    """The (version, symbol) pairs newer than ``maximum`` (GLIBC_PRIVATE always is)."""
    found = set(VERSIONED.findall(objdump_output))
    bad = [(v, n) for v, n in found if _version(v) > _version(maximum)]
    return sorted(bad, key=lambda pair: (_version(pair[0]), pair[1]))


def main(argv):
    objdump, library, maximum = argv
    output = subprocess.run(
        [objdump, "-T", library], check=True, capture_output=True, text=True
    ).stdout
    bad = too_new(output, maximum)
    if bad:
        print(f"{library} needs glibc symbol versions newer than {maximum}:", file=sys.stderr)
        for version, name in bad:
            print(f"  {name}@GLIBC_{version}", file=sys.stderr)
        print(
            "Give them older versions in native/src/glibc_compat.cpp, or build for this "
            "machine's glibc only with PYCUTLASS_RT_MAX_GLIBC=OFF.",
            file=sys.stderr,
        )
        return 1
    newest = max((v for v, _ in VERSIONED.findall(output)), key=_version)
    print(f"{library}: glibc symbol versions up to GLIBC_{newest} (limit {maximum})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
