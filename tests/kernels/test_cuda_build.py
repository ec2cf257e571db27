"""The CUDA kernels compile: a CMake configure + build of the `_kernels_cuda` target (sm_75 and
Jetson Orin's sm_87) into a temporary folder, and the module it links imports.

Nothing CUDA can run on a machine without a GPU (this project's machines have none), so this is
a build test only: the kernels' numbers have not been checked on a device (see README). It runs
where nvcc is installed (`/usr/local/bin/nvcc` on the project's machines, or $CUDACXX); elsewhere
it is skipped. It takes ~30 s of CPU.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _nvcc():
    for candidate in (
        os.environ.get("CUDACXX"),
        shutil.which("nvcc"),
        "/usr/local/bin/nvcc",
        "/usr/local/cuda/bin/nvcc",
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


NVCC = _nvcc()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_cuda_kernels_build_for_sm75_and_sm87_and_import(tmp_path):
    import pybind11

    build = tmp_path / "build"
    configure = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DEDGEFD_CUDA=ON",
        f"-DCMAKE_CUDA_COMPILER={NVCC}",
        "-DCMAKE_CUDA_ARCHITECTURES=75;87",
        "-DCMAKE_CUDA_FLAGS=-Werror=all-warnings",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    for command in (configure, ["cmake", "--build", str(build), "--target", "_kernels_cuda"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (
            f"{' '.join(command[:2])} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )

    (module,) = build.glob("_kernels_cuda*.so")
    objdump = shutil.which("cuobjdump") or str(Path(NVCC).with_name("cuobjdump"))
    if Path(objdump).is_file():  # both architectures' machine code is inside
        listing = subprocess.run([objdump, "--list-elf", str(module)], capture_output=True, text=True).stdout
        assert "sm_75" in listing and "sm_87" in listing, listing

    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import _kernels_cuda as k; "
        "names = {'weighted_kl', 'sl_loss', 'labelwise_mean', 'labelwise_mean_backward', 'gather_mean', "
        "'gather_mean_backward', 'device_count'}; assert names <= set(dir(k)), dir(k); "
        "print(k.device_count())"
    )
    result = subprocess.run([sys.executable, "-c", probe, str(build)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) >= 0  # 0 here: no GPU, and asking must not crash


@pytest.mark.skipif(
    os.environ.get("EDGEFD_CUDA", "").upper() in ("1", "ON", "TRUE"),
    reason="this install was asked to build the CUDA kernels",
)
def test_default_install_is_cpu_only():
    """Without EDGEFD_CUDA the CUDA target is not built, and the kernels dispatch only to C++."""
    from edgefd.kernels import cuda

    assert not cuda.built()
    assert not cuda.available()
