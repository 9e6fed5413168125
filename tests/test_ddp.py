"""Past one GPU, on the engine users already run: examples/ddp_train.py under torchrun with two
processes trains a converted model with DistributedDataParallel; the gradients of one step equal a
single process's over the whole batch, and the benchmark-mode cache rank 0 saves is what the other
rank uses."""
import json
import os
import subprocess
import sys

import pytest
import torch

needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@needs_two_gpus
def test_ddp_training_matches_one_process(tmp_path):
    pytest.importorskip("torchvision")
    out = tmp_path / "ddp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", os.path.join(ROOT, "examples",
           "ddp_train.py"), "--model", "resnet18", "--batch", "4", "--image", "64", "--steps", "2",
           "--cache", str(tmp_path / "cache.json"), "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=600)
    result = json.loads(out.read_text())
    assert result["gpus"] == 2
    assert result["grad_rel_err"] < 1e-4
    assert result["cache_entries_loaded_by_other_ranks"] > 0
