"""Build torchconv._C: CPU kernels always, CUDA kernels when nvcc and a CUDA build of torch are found.

TORCHCONV_CUDA=0/1 forces the CUDA part off/on; TORCH_CUDA_ARCH_LIST picks the GPU targets
(default "8.0;9.0"); MAX_JOBS bounds parallel compile jobs (ninja).
"""
import glob
import os
import re

from setuptools import find_packages, setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))


def want_cuda():
    forced = os.environ.get("TORCHCONV_CUDA")
    if forced is not None:
        return forced not in ("0", "", "false", "False")
    import torch

    home = cpp_extension.CUDA_HOME
    return torch.version.cuda is not None and home is not None and os.path.exists(os.path.join(home, "bin", "nvcc"))


def extension():
    rel = lambda pattern: sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))
    sources = rel("csrc/*.cpp") + rel("csrc/cpu/*.cpp")
    cxx = ["-O3", "-fopenmp"]
    kwargs = dict(extra_link_args=["-fopenmp"])
    if want_cuda():
        # Hopper's wgmma kernels need the architecture-specific target 9.0a, which runs on every
        # compute-capability-9.0 GPU (H100, H200): a 9.0 in the list is built as 9.0a.
        archs = re.split(r"[;\s]+", os.environ.get("TORCH_CUDA_ARCH_LIST", "8.0;9.0").strip())
        archs = ["9.0a" if a == "9.0" else a for a in archs if a]
        os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
        sources += rel("csrc/cuda/**/*.cu")
        nvcc = ["-O3", "-lineinfo", "--expt-relaxed-constexpr"]
        if "9.0a" in archs:
            nvcc.append("-DTORCHCONV_WGMMA")
        if os.environ.get("TORCHCONV_PTXAS_VERBOSE"):
            nvcc.append("-Xptxas=-v")
        return cpp_extension.CUDAExtension(
            "torchconv._C", sources, extra_compile_args={"cxx": cxx + ["-DTORCHCONV_WITH_CUDA"], "nvcc": nvcc}, **kwargs
        )
    return cpp_extension.CppExtension("torchconv._C", sources, extra_compile_args={"cxx": cxx}, **kwargs)


setup(
    name="torchconv",
    version="0.1.0",
    description="Hand-written convolution algorithms (direct, CSG, unrolled GEMM, Winograd) as PyTorch operators",
    packages=find_packages(include=["torchconv", "torchconv.*"]),
    ext_modules=[extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.9",
    install_requires=["torch"],
)
