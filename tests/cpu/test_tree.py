"""The test tree itself: pytest imports test modules by their basename (rootdir-relative
packages are not used), so two files of one name in tests/cpu and tests/gpu make the
whole run fail at collection."""

import collections
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)


def test_test_modules_have_distinct_basenames():
    seen = collections.defaultdict(list)
    for folder, _, files in os.walk(TESTS):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen[name].append(os.path.relpath(os.path.join(folder, name), TESTS))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename: {clashes}"
