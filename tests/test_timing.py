"""The timing protocol (torchconv.timing), shared by benchmark mode, explain() and the benchmarks:
contenders interleaved in a seeded random order per round, medians per round, the ratio's spread."""
import time

import pytest
import torch

from torchconv import timing


def test_every_contender_runs_in_every_round_in_a_shuffled_order():
    log = []
    fns = {name: (lambda name=name: log.append(name)) for name in "abcd"}
    per_round = timing.interleaved(fns, "cpu", rounds=8, reps=3, warmup=1, seed=3)
    assert {name: len(v) for name, v in per_round.items()} == {name: 8 for name in "abcd"}
    runs = log[4:]  # after one warm-up call each
    assert len(runs) == 8 * 4 * 3
    rounds = [runs[i:i + 12] for i in range(0, len(runs), 12)]
    orders = [tuple(r[::3]) for r in rounds]
    for r, order in zip(rounds, orders):
        assert sorted(order) == list("abcd")  # each contender once per round...
        assert r == [name for name in order for _ in range(3)]  # ...its repetitions back to back
    assert len(set(orders)) > 1  # ...in orders that change between rounds
    log.clear()
    timing.interleaved(fns, "cpu", rounds=8, reps=3, warmup=1, seed=3)
    assert log[4:] == runs  # the same seed gives the same order


def test_compare_reports_the_median_ratio_and_its_spread():
    result = timing.compare(lambda: time.sleep(0.001), lambda: time.sleep(0.004), "cpu", rounds=5, reps=2)
    assert result["rounds"] == 5
    assert result["ratio_min"] <= result["ratio"] <= result["ratio_max"]
    assert 1.5 < result["ratio"] < 6
    assert result["ms"] < result["reference_ms"]


def test_a_spread_over_ten_percent_is_flagged():
    calls = [0]

    def drifting():  # every other round takes four times as long
        calls[0] += 1
        time.sleep(0.004 if ((calls[0] - 1) // 2) % 2 else 0.001)

    result = timing.compare(drifting, lambda: time.sleep(0.002), "cpu", rounds=6, reps=2, warmup=0)
    assert result["spread_flag"]
    steady = timing.compare(lambda: time.sleep(0.003), lambda: time.sleep(0.003), "cpu", rounds=5, reps=3)
    assert steady["ratio"] == pytest.approx(1.0, rel=0.5)


def test_device_time_on_a_cpu_is_the_wall_clock():
    per_round = timing.interleaved({"a": lambda: time.sleep(0.002)}, "cpu", rounds=3, reps=2, warmup=1,
                                   device_time=True)
    assert min(per_round["a"]) >= 1.9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_device_time_leaves_out_the_host_path():
    """Benchmark mode times training calls this way: a callable with 3 ms of host work and a kernel
    of a few µs takes milliseconds by the events around it (in a round the GPU was free for), microseconds
    by the device alone in every round."""
    fns = {"host_heavy": lambda: (time.sleep(0.003), torch.cuda._sleep(1000))}
    with_host = timing.interleaved(fns, "cuda", rounds=3, reps=3, warmup=1)["host_heavy"]
    device_only = timing.interleaved(fns, "cuda", rounds=3, reps=3, warmup=1, device_time=True)["host_heavy"]
    # Milliseconds against microseconds, with room for a GPU shared with other processes (the suite's
    # shards): their work can hold back the start event past the host's sleep, which shortens the
    # events' interval to the kernel's in that round; the device's time never holds the host path.
    assert max(with_host) > 1.0
    assert max(device_only) < 0.5


def test_environment_records_the_run_for_result_files():
    """timing.environment: what every result file's meta records (benchmarks/bench.py adds its own
    fields to it, examples/resnet50.py writes it as is): on a CPU no cuDNN and no FP32 peak."""
    import datetime

    import torchconv

    env = timing.environment(torch.device("cpu"))
    assert env.keys() == {"gpu", "torch", "cudnn", "cuda", "torchconv", "date", "fp32_peak_tflops"}
    assert (env["gpu"], env["cudnn"], env["fp32_peak_tflops"]) == ("cpu", None, None)
    assert env["torch"] == torch.__version__ and env["torchconv"] == torchconv.__version__
    assert datetime.datetime.fromisoformat(env["date"]).tzinfo is not None
