"""native/build_backend.py's pins: every fetched wheel (CUTLASS, the CUDA 13 wheels) is
named by version and SHA-256, and pip refuses a file of another digest, offline too."""

import hashlib
import importlib.util
import os
import subprocess
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def backend(monkeypatch):
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.skip("scikit-build-core is not installed (pip install '.[test]')")
    monkeypatch.syspath_prepend(os.path.join(ROOT, "native"))
    import build_backend

    return build_backend


def test_every_fetched_wheel_is_pinned_by_digest(backend):
    for pin in [backend.CUTLASS, *backend.CUDA_WHEELS]:
        assert pin.version.count(".") >= 2 and pin.sha256
        assert all(len(h) == 64 and int(h, 16) >= 0 for h in pin.sha256)
        line = pin.requirement()
        assert line.startswith(f"{pin.name}=={pin.version} --hash=sha256:")


def fake_wheel(folder, name="nvidia_cutlass", version="4.2.0.0"):
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.txt", "not the real wheel")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest()


def test_pip_refuses_a_wheel_of_another_digest_offline(backend, tmp_path, monkeypatch):
    links, dest = tmp_path / "links", tmp_path / "dest"
    links.mkdir(), dest.mkdir()
    _, digest = fake_wheel(str(links))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    with pytest.raises(subprocess.CalledProcessError):
        backend._download([backend.CUTLASS], str(dest))  # the real pin: not this file
    assert not [f for f in os.listdir(dest) if f.endswith(".whl")]
    pin = backend.Pin("nvidia-cutlass", "4.2.0.0", (digest,))
    (got,) = backend._download([pin], str(dest))  # the file's own digest: taken
    assert os.path.basename(got).startswith("nvidia_cutlass-4.2.0.0")


def test_unpacking_keeps_executable_bits(backend, tmp_path):
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w") as z:
        info = zipfile.ZipInfo("nvidia/cu13/bin/nvcc")
        info.external_attr = 0o755 << 16
        z.writestr(info, "#!/bin/sh\n")
        z.writestr("pkg-1.0.dist-info/RECORD", "")
    backend._unpack(str(path), str(tmp_path / "tree"))
    tool = tmp_path / "tree" / "nvidia" / "cu13" / "bin" / "nvcc"
    assert os.access(tool, os.X_OK) and not (tmp_path / "tree" / "pkg-1.0.dist-info").exists()


def fake_nvcc(folder, release):
    path = os.path.join(folder, "nvcc")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    os.chmod(path, 0o755)
    return path


@pytest.mark.parametrize("release, version", [("12.4", "+cu12"), ("12.9", "+cu12"), ("13.0", "")])
def test_the_toolkit_names_the_wheels_cuda_variant(
    backend, tmp_path, monkeypatch, release, version
):
    """A CUDA 12 toolkit builds the +cu12 local version (pyproject.toml's override), CUDA 13
    the plain one: both variants of one release can sit on one index."""
    monkeypatch.setenv(backend.VARIANT_ENV, "")  # restored as it was after the test
    monkeypatch.delenv(backend.VARIANT_ENV)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "md"
    out.mkdir()
    nvcc = fake_nvcc(str(tmp_path), release)
    name = backend.prepare_metadata_for_build_wheel(
        str(out), {"cmake.define.CMAKE_CUDA_COMPILER": nvcc}
    )
    from pycutlass_rt._version import __version__

    assert name == f"pycutlass_rt-{__version__}{version}.dist-info"
    metadata = (out / name / "METADATA").read_text()
    assert f"\nVersion: {__version__}{version}\n" in metadata


def test_a_variant_that_disagrees_with_the_toolkit_is_refused(backend, tmp_path, monkeypatch):
    monkeypatch.setenv(backend.VARIANT_ENV, "cu12")
    nvcc = fake_nvcc(str(tmp_path), "13.0")
    with pytest.raises(RuntimeError, match="CUDA 13"):
        backend.set_cuda_variant({"cmake.define.CMAKE_CUDA_COMPILER": nvcc})


def test_a_toolkit_older_than_cuda_12_is_refused(backend, tmp_path, monkeypatch):
    monkeypatch.setenv(backend.VARIANT_ENV, "")  # restored as it was after the test
    monkeypatch.delenv(backend.VARIANT_ENV)
    nvcc = fake_nvcc(str(tmp_path), "11.8")
    with pytest.raises(RuntimeError, match="too old"):
        backend.set_cuda_variant({"cmake.define.CMAKE_CUDA_COMPILER": nvcc})
