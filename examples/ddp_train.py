"""Data-parallel training of a converted torchvision model with torch.nn.parallel.DistributedDataParallel,
one process per GPU (random data, a few SGD steps):

    torchrun --nproc_per_node=2 examples/ddp_train.py --model resnet50 --batch 32 --out ddp.json

1. Rank 0 measures the model's convolutions in benchmark mode (torchconv.tune) and saves the cache;
   every other rank loads it instead of measuring (the choices are the same GPU model's).
2. One step on a global batch split across the ranks: the gradients DDP averages are compared with
   those of one process computing the whole batch (evaluation-mode batch norm, so the two are the
   same function of the data).
3. --steps training steps timed per step, then the same with the unconverted model (cuDNN FP32).
Rank 0 prints a summary and writes it to --out as JSON.
"""
import argparse
import copy
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torchconv


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=32, help="images per GPU")
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--cache", default="/tmp/torchconv-ddp-cache.json")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def build(name):
    import torchvision

    torch.manual_seed(0)  # every rank starts from the same weights
    return getattr(torchvision.models, name)(weights=None)


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def time_steps(model, x, target, steps):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), target).backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps


def main(argv=None):
    args = parse_args(argv)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True

    reference = build(args.model).to(device)
    model = torchconv.convert(copy.deepcopy(reference))
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(world * args.batch, 3, args.image, args.image, generator=gen)
    labels = torch.randint(0, 1000, (world * args.batch,), generator=gen)
    x = images[rank * args.batch:(rank + 1) * args.batch].to(device)
    target = labels[rank * args.batch:(rank + 1) * args.batch].to(device)

    # 1. Benchmark mode: rank 0 measures and saves, the others load.
    t0 = time.perf_counter()
    if rank == 0:
        torchconv.tune(copy.deepcopy(model).train(), x, train=True, progress=False)
        torchconv.save_cache(args.cache)
    dist.barrier()
    loaded = 0
    if rank != 0:
        loaded, _ = torchconv.load_cache(args.cache)
        torchconv.set_benchmark(True)
    tune_s = time.perf_counter() - t0
    loaded_counts = torch.tensor([loaded], device=device)
    dist.all_reduce(loaded_counts)

    # 2. One DDP step on the split batch against one process on the whole batch.
    ddp = DDP(copy.deepcopy(model).eval(), device_ids=[device.index])
    F.cross_entropy(ddp(x), target).backward()
    grad_err = None
    if rank == 0:
        single = copy.deepcopy(model).eval()
        F.cross_entropy(single(images.to(device)), labels.to(device)).backward()
        grad_err = max(rel_err(p.grad, q.grad) for p, q in zip(ddp.module.parameters(), single.parameters()))

    # 3. Time per training step, torchconv then the unconverted model.
    ours_ms = time_steps(DDP(copy.deepcopy(model).train(), device_ids=[device.index]), x, target, args.steps)
    cudnn_ms = time_steps(DDP(copy.deepcopy(reference).train(), device_ids=[device.index]), x, target, args.steps)
    if rank == 0:
        result = dict(model=args.model, gpus=world, gpu=torch.cuda.get_device_name(device), batch_per_gpu=args.batch,
                      image=args.image, steps=args.steps, grad_rel_err=grad_err,
                      cache_entries_loaded_by_other_ranks=int(loaded_counts.item()), tune_s=round(tune_s, 1),
                      ms_per_step=ours_ms, cudnn_ms_per_step=cudnn_ms, ratio=cudnn_ms / ours_ms,
                      torch=torch.__version__, torchconv=torchconv.__version__, precision="fp32", layout="nchw")
        print(json.dumps(result, indent=1))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
