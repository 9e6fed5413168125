# Two commands do all set-up on a fresh machine (a venv with torch, the build, then the work):
#   make demo   runs examples/quickstart.py
#   make test   runs the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.14.1
export CUDA_HOME ?= /usr/local/cuda
SOURCES := setup.py $(wildcard csrc/*.h csrc/*.cpp csrc/cpu/*.h csrc/cpu/*.cpp csrc/cuda/*/*.cuh csrc/cuda/*/*.cu)

.PHONY: demo test bench-smoke clean

$(VENV)/.deps:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)" numpy pytest ninja pybind11 expecttest hypothesis torchvision onnxscript
	touch $@

$(VENV)/.built: $(VENV)/.deps $(SOURCES)
	MAX_JOBS=$${MAX_JOBS:-2} $(PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

demo: $(VENV)/.built
	$(PY) examples/quickstart.py

test: $(VENV)/.built
	$(PY) -m pytest tests -q

bench-smoke: $(VENV)/.built
	$(PY) benchmarks/bench.py --suite smoke --out-dir /tmp/torchconv-bench

clean:
	rm -rf build *.egg-info torchconv/_C*.so $(VENV)
