"""The benchmark harness runs (a smoke suite here) and writes JSON in the stable shape later tools read."""
import json
import os
import sys
import zlib

import pytest
import torch

import torchconv
from conftest import needs_cuda_build

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import bench  # noqa: E402

ROW_KEYS = {"suite", "layer", "N", "C", "K", "H", "W", "R", "S", "stride", "padding", "dilation", "groups", "algorithm",
            "config", "mode", "weights", "dtype", "precision", "layout", "ms", "tflops", "cudnn_ms", "ratio",
            "ratio_min", "ratio_max", "rounds", "spread_flag", "rel_err", "weight_cache"}
META_KEYS = {"gpu", "torch", "cudnn", "cuda", "date", "fp32_peak_tflops"}


def test_resnet50_example_runs_on_the_cpu_and_records_the_environment(tmp_path):
    """examples/resnet50.py (torchvision's ResNet-50 converted, against nn.Conv2d at the same
    precision) runs on the CPU at a small image and writes its rows with the environment that
    benchmarks/bench.py records too (torchconv.timing.environment)."""
    import subprocess

    pytest.importorskip("torchvision")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    done = subprocess.run([sys.executable, os.path.join(root, "examples", "resnet50.py"), "--device", "cpu",
                           "--batch", "1", "--precision", "fp32", "--train-batch", "0", "--explain-batch", "0",
                           "--image", "32", "--warmup", "1", "--reps", "1", "--no-benchmark", "--no-graph",
                           "--out-dir", str(tmp_path), "--tag", "smoke"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert data["meta"].keys() == torchconv.timing.environment(torch.device("cpu")).keys() >= META_KEYS
    assert {(r["algorithm"], r["mode"], r["N"]) for r in data["rows"]} >= {("auto", "fwd", 1), ("cudnn", "fwd", 1)}
    assert all(r["rel_err"] < 1e-5 for r in data["rows"] if r["rel_err"] is not None)
    assert bench.environment(torch.device("cpu")).items() >= {
        k: v for k, v in data["meta"].items() if k != "date"}.items()


def test_smoke_benchmark_writes_results(tmp_path):
    rows = bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "2", "--warmup", "1",
                       "--rounds", "3", "--out-dir", str(tmp_path), "--tag", "smoke"])
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert META_KEYS <= set(data["meta"])
    assert data["rows"] and all(ROW_KEYS <= set(r) for r in data["rows"])
    assert {r["mode"] for r in rows} == {"fwd", "fwdbwd"}
    ours = [r for r in data["rows"] if r["algorithm"] != "aten"]
    assert {r["algorithm"] for r in ours} == {"direct", "csg", "gemm", "winograd"}
    assert all(r["rel_err"] < 1e-5 for r in ours)
    # fwdbwd rows check both gradients too; the ratio is the median of the per-round ratios.
    assert all(set(r["errors"]) == {"output", "grad_input", "grad_weight"} for r in ours if r["mode"] == "fwdbwd")
    assert all(r["ratio_min"] <= r["ratio"] <= r["ratio_max"] and r["rounds"] == 3 for r in data["rows"])
    # Forward rows come with frozen and with trainable weights; only frozen ones may use the cache.
    assert {(r["mode"], r["weights"]) for r in ours} == {("fwd", "frozen"), ("fwd", "trainable"), ("fwdbwd", "trainable")}
    assert not any(r["weight_cache"] for r in ours if r["weights"] == "trainable")
    assert (tmp_path / "smoke.md").read_text().startswith("# torchconv benchmark")


def test_profile_mode_reports_per_kernel_times(tmp_path):
    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--mode", "fwd",
                "--algorithms", "cudnn,direct,gemm", "--profile", "--out-dir", str(tmp_path), "--tag", "prof"])
    data = json.loads((tmp_path / "prof.json").read_text())
    layer = data["profile"]["smoke/S1/N1"]
    assert set(layer) == {"aten", "direct", "gemm"}
    assert any("torchconv::conv2d_direct" in k for k in layer["direct"])
    # The host time per call, next to the kernels', for ours and the reference.
    host = data["host_us"]["smoke/S1/N1"]
    assert set(host) == {"aten", "direct", "gemm"} and all(us > 0 for us in host.values())
    text = (tmp_path / "prof.md").read_text()
    assert "Per-kernel time" in text and "- **direct**: host " in text
    # A later run without profiles, rewriting the file by row, keeps them.
    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--mode", "fwd",
                "--algorithms", "cudnn,direct", "--layers", "S1", "--out-dir", str(tmp_path), "--tag", "prof"])
    again = json.loads((tmp_path / "prof.json").read_text())
    assert again["profile"] == data["profile"] and again["host_us"] == data["host_us"]
    assert "Per-kernel time" in (tmp_path / "prof.md").read_text()


def test_model_profile_reports_both_contenders_and_the_choices(tmp_path):
    pytest.importorskip("torchvision")
    import profile_model

    argv = ["--model", "mobilenet_v3_large", "--batch", "2", "--image", "32", "--steps", "1", "--device", "cpu",
            "--top", "3", "--out-dir", str(tmp_path)]
    report = profile_model.main(argv)
    assert set(report["contenders"]) == {"ours", "cudnn"}
    assert report["contenders"]["ours"]["torchconv_device_ms"] > 0
    assert report["contenders"]["cudnn"]["torchconv_device_ms"] == 0
    assert report["choices"] and all(c["train"] for c in report["choices"] if c["input"][1] > 3)
    profile_model.main(argv)  # a rerun replaces its entry in the one file per GPU
    saved = json.loads((tmp_path / "profile-models-cpu.json").read_text())["profiles"]
    assert [(r["model"], r["mode"], r["batch"]) for r in saved] == [("mobilenet_v3_large", "train", 2)]
    assert "## mobilenet_v3_large train N=2" in (tmp_path / "profile-models-cpu.md").read_text()


def test_models_rows_per_mode_against_the_reference_model(tmp_path):
    """models.py (not --zoo): per model and mode (inference, a training step) a row for the reference
    model and one for the converted model in benchmark mode, with its logits' error against the
    reference's and the algorithms it chose; the file is rewritten in place by row (a rerun of one mode
    keeps the other's rows)."""
    pytest.importorskip("torchvision")
    import models

    argv = ["--models", "squeezenet1_1", "--batch", "4", "--image", "64", "--rounds", "1", "--reps", "1",
            "--device", "cpu", "--out-dir", str(tmp_path), "--tag", "models-test"]
    rows = models.main(argv)
    assert sorted((r["mode"], r["algorithm"]) for r in rows) == [("fwd", "auto"), ("fwd", "cudnn"),
                                                                   ("train", "auto"), ("train", "cudnn")]
    ours = [r for r in rows if r["algorithm"] == "auto"]
    assert all(r["rel_err"] < 1e-5 and sum(r["algorithms"].values()) == 26 and r["ms"] > 0 for r in ours), ours
    models.main(argv + ["--modes", "fwd"])
    saved = json.loads((tmp_path / "models-test.json").read_text())["rows"]
    assert sorted((r["mode"], r["algorithm"]) for r in saved) == sorted((r["mode"], r["algorithm"]) for r in rows)
    assert "squeezenet1_1" in (tmp_path / "models-test.md").read_text()
    # Per-sample gradients (vmap(grad)) against the same transform over the nn.Conv2d model.
    (per_sample,) = [r for r in models.main(argv + ["--modes", "per-sample", "--batch", "2"]) if r["algorithm"] == "auto"]
    assert per_sample["rel_err"] < 1e-5 and per_sample["ms"] > 0 and per_sample["config"] == "rule"


def test_pass_times_reports_each_pass_with_the_rules_choice(tmp_path):
    """pass_times.py: one row per layer, weights kind, pass and contender, ours with the config its
    rule picked; on a CPU the reference is ATen's."""
    import pass_times

    rows = pass_times.main(["--layers", "mbv3-se-32-120@1", "--batch", "2", "--rounds", "1", "--reps", "1",
                            "--device", "cpu", "--out-dir", str(tmp_path)])
    assert {(r["weights"], r["pass_"], r["algorithm"]) for r in rows} == {
        (w, p, a) for w in ("frozen", "trainable") for p in pass_times.PASSES for a in ("aten", "gemm", "csg")}
    assert all(r["us"] > 0 and r["precision"] == "fp32" and r["groups"] == 1 for r in rows)
    text = (tmp_path / "pass-times-cpu.md").read_text()
    assert "## grad_weight" in text
    assert "| mbv3-se-32-120@1 | fp32 | nchw | frozen | 2 |" in text
    assert "| mbv3-se-32-120@1 | fp32 | nchw | trainable | 2 |" in text
    assert "| grad_weight | pointwise | fp32 | nchw | frozen | 2 | gemm |" in text  # each batch apart
    # One current file per suite and GPU: a rerun's rows replace the file's rows they measure again
    # (the trainable ones here), and the others stay.
    rerun = pass_times.main(["--layers", "mbv3-se-32-120@1", "--batch", "2", "--rounds", "1", "--reps", "1",
                             "--weights", "trainable", "--device", "cpu", "--out-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "pass-times-cpu.json").read_text())["rows"]
    assert len(saved) == len(rows)
    assert [r for r in saved if r["weights"] == "frozen"] == [r for r in rows if r["weights"] == "frozen"]
    assert [r for r in saved if r["weights"] == "trainable"] == rerun


def test_pass_times_of_a_suite_at_each_precision_and_layout(tmp_path):
    """pass_times.py --suite / --precision / --layout: rows per precision and memory format (both
    sides the same), with the layer's own shape; an algorithm that cannot run a layer (Winograd on a
    1x1 or strided one) has no row for it, and the file is named after the suite."""
    import pass_times

    rows = pass_times.main(["--suite", "smoke", "--precision", "fp32,bf16", "--layout", "nchw,nhwc",
                            "--algorithms", "gemm,winograd", "--weights", "trainable", "--batch", "1",
                            "--rounds", "1", "--reps", "1", "--device", "cpu", "--out-dir", str(tmp_path)])
    assert {(r["precision"], r["layout"]) for r in rows} == {
        (p, lay) for p in ("fp32", "bf16") for lay in ("nchw", "nhwc")}
    assert {(r["layer"], r["algorithm"]) for r in rows} == {
        ("S1", "aten"), ("S1", "gemm"), ("S1", "winograd"), ("S2", "aten"), ("S2", "gemm"), ("S3", "aten"),
        ("S3", "gemm")}
    s3 = next(r for r in rows if r["layer"] == "S3")
    assert (s3["R"], s3["S"], s3["stride"], s3["suite"]) == (5, 5, 2, "smoke")
    text = (tmp_path / "pass-times-smoke-cpu.md").read_text()
    assert "| S2 | bf16 | nhwc | trainable | 1 |" in text and "- | - | -" in text


@needs_cuda_build
def test_pass_times_with_forced_configs(tmp_path):
    """pass_times.py --configs: each algorithm:config is a contender of its own, every pass run with that
    tile config forced, and the rule's config is back after it."""
    import pass_times

    rows = pass_times.main(["--suite", "smoke", "--layers", "S1", "--algorithms", "gemm",
                            "--configs", "gemm:medium,gemm:small", "--weights", "trainable", "--batch", "1",
                            "--rounds", "1", "--reps", "1", "--device", "cpu", "--out-dir", str(tmp_path)])
    assert {(r["pass_"], r["algorithm"]) for r in rows} == {
        (p, a) for p in pass_times.PASSES for a in ("aten", "gemm", "gemm:medium", "gemm:small")}
    assert torchconv.get_config("gemm") == ""
    assert "gemm:small us" in (tmp_path / "pass-times-smoke-cpu.md").read_text()


def test_precision_and_layout_rows(tmp_path):
    """--precision / --layout: both sides run the same precision and memory format; every row says
    which, with groups and dilation; reduced-precision rows carry the reference's own error."""
    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--mode", "fwd",
                "--weights", "frozen", "--algorithms", "cudnn,gemm", "--precision", "fp32,bf16",
                "--layout", "nchw,nhwc", "--out-dir", str(tmp_path), "--tag", "prec"])
    rows = json.loads((tmp_path / "prec.json").read_text())["rows"]
    combos = {(r["precision"], r["layout"]) for r in rows}
    assert combos == {("fp32", "nchw"), ("fp32", "nhwc"), ("bf16", "nchw"), ("bf16", "nhwc")}
    assert all("groups" in r and "dilation" in r for r in rows)
    for r in rows:
        assert r["dtype"] == ("bfloat16" if r["precision"] == "bf16" else "float32")
        if r["precision"] == "bf16":
            assert r["rel_err"] < 2 ** -6 and (r["algorithm"] == "aten" or r["reference_rel_err"] is not None)
    md = (tmp_path / "prec.md").read_text()
    assert "| smoke | bf16 | nhwc |" in md


def test_result_file_is_rewritten_in_place(tmp_path):
    """A run replaces the rows it measured anew (precision, layout, batch, mode, weights, layer,
    algorithm, config); the others stay: other precisions, and other algorithms' rows of the same
    layers and precision."""
    run = lambda *extra: bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup",  # noqa: E731
                                     "0", "--mode", "fwd", "--weights", "frozen", "--out-dir", str(tmp_path),
                                     "--tag", "suite", *extra])
    rows = lambda: json.loads((tmp_path / "suite.json").read_text())["rows"]  # noqa: E731
    run("--algorithms", "cudnn,gemm")
    first = len(rows())
    run("--algorithms", "cudnn,gemm", "--precision", "bf16", "--layout", "nhwc")
    assert len(rows()) == 2 * first
    run("--algorithms", "cudnn,gemm")
    assert len(rows()) == 2 * first
    assert {(r["precision"], r["layout"]) for r in rows()} == {("fp32", "nchw"), ("bf16", "nhwc")}
    assert all(r.get("date") for r in rows())
    gemm_rows = [r for r in rows() if r["algorithm"] == "gemm"]
    run("--algorithms", "cudnn,direct")
    assert [r for r in rows() if r["algorithm"] == "gemm"] == gemm_rows
    assert {r["algorithm"] for r in rows() if r["precision"] == "fp32"} == {"aten", "gemm", "direct"}


def test_variant_spec_stages_and_workspace_columns(tmp_path):
    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--mode", "fwd",
                "--algorithms", "cudnn,winograd:staged", "--stages", "--out-dir", str(tmp_path), "--tag", "stages"])
    data = json.loads((tmp_path / "stages.json").read_text())
    ours = [r for r in data["rows"] if r["algorithm"] == "winograd:staged"]
    assert ours and all(r["config"] == "staged" and r["stages_us"] for r in ours)
    assert all("workspace_bytes" in r for r in ours)
    assert "time per stage" in (tmp_path / "stages.md").read_text()


def test_compare_reruns_a_result_file_and_reports_old_against_new(tmp_path, capsys):
    import compare

    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--rounds", "3",
                "--mode", "fwd", "--weights", "frozen", "--algorithms", "cudnn,direct,gemm", "--out-dir", str(tmp_path),
                "--tag", "old"])
    common, outside = compare.main([str(tmp_path / "old.json"), "--against", str(tmp_path / "old.json")])
    assert len(common) == 6 and outside == 0  # a file against itself
    capsys.readouterr()
    common, _ = compare.main([str(tmp_path / "old.json"), "--layers", "S1", "--rounds", "3", "--reps", "1"])
    assert {k[0] for k in common} == {"S1"} and {k[4] for k in common} == {"direct", "gemm"}
    assert "rows within noise" in capsys.readouterr().out
    assert not compare.within_noise(dict(ratio=1.0), dict(ratio=0.8, ratio_min=0.78, ratio_max=0.82))
    # Rows of several precisions and layouts stay apart and re-run at their own precision and layout.
    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--rounds", "3",
                "--mode", "fwd", "--weights", "frozen", "--algorithms", "cudnn,gemm", "--precision", "fp32,bf16",
                "--layout", "nchw,nhwc", "--out-dir", str(tmp_path), "--tag", "prec"])
    common, outside = compare.main([str(tmp_path / "prec.json"), "--against", str(tmp_path / "prec.json")])
    assert len(common) == 12 and outside == 0
    common, _ = compare.main([str(tmp_path / "prec.json"), "--layers", "S1", "--rounds", "3", "--reps", "1"])
    assert {(k[5], k[6]) for k in common} == {("fp32", "nchw"), ("fp32", "nhwc"), ("bf16", "nchw"), ("bf16", "nhwc")}
    assert compare.within_noise(dict(ratio=1.0), dict(ratio=0.8, ratio_min=0.7, ratio_max=1.05))


def test_readme_results_section_is_rendered_from_the_result_files():
    """Every number in the README's results section comes from benchmarks/results/."""
    import render_readme

    assert render_readme.main(["--check"]) == 0


def test_readme_zoo_line_names_the_models_a_stopped_run_did_not_reach():
    """models.py --zoo rewrites its file after each model and records the models it was to run; the
    README's zoo line counts against those and names the ones a stopped run did not reach."""
    import render_readme

    row = dict(model="resnet18", ok=True, batch=16, logit_err=1e-6, ratio=1.1, train_ratio=1.2, layer_grad_err=2e-6,
               layer_grad_over=[])
    meta = dict(gpu="NVIDIA H200", cudnn=91900, torch="2.11.0", date="2026-12-01T00:00:00+00:00")
    whole = render_readme.zoo_table("zoo-h200.json", dict(meta=meta, models=["resnet18"], rows=[row]))[0]
    assert whole.startswith("Model zoo: 1 of 1 torchvision models") and "not reached" not in whole
    stopped = render_readme.zoo_table("zoo-h200.json", dict(meta=meta, models=["resnet18", "vgg11", "alexnet"],
                                                            rows=[row]))[0]
    assert stopped.startswith("Model zoo: 1 of 3 torchvision models") and "(vgg11, alexnet not reached" in stopped


def test_readme_names_passes_over_twice_cudnns_error_on_the_same_quantity():
    """The tensor-core table's error column compares each side's largest error of a layer, which can hide a
    pass: a gradient at TF32's error where cuDNN, allowed TF32, ran an algorithm at FP32's. Each quantity
    is compared with cuDNN's twin row (same layer and setting) and the passes over twice its error named."""
    import render_readme

    base = dict(suite="resnet", layer="R1", precision="tf32", layout="nhwc", N=32, mode="fwdbwd", weights="trainable")
    ours = dict(base, algorithm="gemm", errors=dict(output=3e-4, grad_input=2.9e-4, grad_weight=3e-4))
    cudnn = dict(base, algorithm="cudnn", errors=dict(output=3e-4, grad_input=1.6e-7, grad_weight=2e-4))
    other = dict(cudnn, layout="nchw", errors=dict(output=1e-9, grad_input=1e-9, grad_weight=1e-9))
    found = render_readme.passes_over_twice([ours], [ours, cudnn, other])
    assert [(r["layer"], q, a, b) for r, q, a, b in found] == [("R1", "grad_input", 2.9e-4, 1.6e-7)]
    assert render_readme.passes_over_twice([dict(ours, errors=None)], [cudnn]) == []


def test_readme_table_dates_its_rows_where_a_merged_file_holds_several_runs():
    """A result file merges runs by row, so its last run's day need not be that of a table's rows: a
    table names the days its own rows were taken (the first and last where they differ), and the file's
    last run only where no row carries a date."""
    import render_readme

    meta = dict(gpu="NVIDIA H100 80GB HBM3", cudnn=91900, torch="2.11.0", date="2026-12-06T07:25:00+00:00")
    data = dict(meta=meta, rows=[])
    older = [dict(date="2026-11-27T04:45:37+00:00"), dict(date="2026-11-27T04:56:03+00:00")]
    assert render_readme.source("s-h100.json", data, older).endswith("torch 2.11.0, 2026-11-27)")
    both = older + [dict(date="2026-12-06T07:24:00+00:00")]
    assert render_readme.source("s-h100.json", data, both).endswith("rows taken 2026-11-27 to 2026-12-06)")
    assert render_readme.source("s-h100.json", data, [dict()]).endswith("torch 2.11.0, 2026-12-06)")
    assert render_readme.source("s-h100.json", data).endswith("torch 2.11.0, 2026-12-06)")


def test_readme_depthwise_channels_last_columns_split_by_weights_where_a_file_has_both():
    """The channels_last depthwise table: one column per precision, batch and mode, split into frozen
    and trainable columns only where the file holds both; a file of channels_last rows alone renders
    that table alone."""
    import render_readme

    meta = dict(gpu="NVIDIA H200", cudnn=91900, torch="2.11.0", date="2026-12-04T00:00:00+00:00")

    def row(weights, n, ratio):
        return dict(layer="dw", algorithm="direct", layout="nhwc", precision="bf16", N=n, mode="fwd",
                    weights=weights, ratio=ratio, ms=0.02, bound_ms=0.01, bound="memory", R=3, S=3, stride=1, groups=8)

    lines = render_readme.depthwise_table("depthwise-h200.json", dict(meta=meta, rows=[
        row("frozen", 32, 1.5), row("trainable", 32, 1.2), row("frozen", 1, 1.3)]))
    header = next(line for line in lines if line.startswith("| layer |"))
    assert header == ("| layer | bf16 fwd N=32 frozen | bf16 fwd N=32 trainable | bf16 fwd N=1 "
                      "| % of roofline (bf16 fwd N=32) |")
    assert "| dw | 1.50x | 1.20x | 1.30x | 50% (memory) |" in lines
    assert lines[0].startswith("The same layers in channels_last") and "weight cache" in lines[0]


def test_winograd_error_study_builds_exact_transforms():
    """benchmarks/winograd_error.py builds F(m x m, 3 x 3) from any interpolation points: in float64
    each variant equals a direct convolution (partial tiles, H != W), float32 stays within 1e-5, and
    A^T holds the points' powers, the point at infinity last."""
    import winograd_error as we

    x = torch.randn(2, 5, 11, 9, dtype=torch.float64)
    w = torch.randn(7, 5, 3, 3, dtype=torch.float64)
    ref = torch.nn.functional.conv2d(x, w, padding=1)
    for m, points in we.VARIANTS.values():
        mats = we.transforms(m, points)
        assert we.rel_err(we.winograd_conv(x, w, 1, m, *mats, torch.float64), ref) < 1e-12
        assert we.rel_err(we.winograd_conv(x, w, 1, m, *mats, torch.float32), ref) < 1e-5
    at, _, _ = we.transforms(2, [0.0, 1.0, -1.0])
    assert torch.equal(at, torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, 1.0]], dtype=torch.float64))


def test_merge_by_row_replaces_only_the_rerun_algorithms(tmp_path):
    """A rerun of some algorithms on some layers replaces those rows only; a plain merge replaces
    whole groups (suite, precision, layout, batch, mode, weights)."""
    import merge_results

    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--rounds", "1",
                "--mode", "fwd", "--weights", "frozen", "--algorithms", "cudnn,direct,winograd",
                "--out-dir", str(tmp_path), "--tag", "target"])
    bench.main(["--suite", "smoke", "--device", "cpu", "--batch", "1", "--reps", "1", "--warmup", "0", "--rounds", "1",
                "--mode", "fwd", "--weights", "frozen", "--algorithms", "winograd:f4x4", "--layers", "S1",
                "--out-dir", str(tmp_path), "--tag", "rerun"])
    target, rerun = tmp_path / "target.json", tmp_path / "rerun.json"
    before = json.loads(target.read_text())["rows"]
    merge_results.main([str(target), str(rerun), "--by-row"])
    after = json.loads(target.read_text())["rows"]
    key = lambda r: (r["layer"], r["algorithm"])
    assert {key(r) for r in after} == {key(r) for r in before} | {("S1", "aten"), ("S1", "winograd:f4x4")}
    assert [r for r in after if key(r) == ("S3", "direct")] == [r for r in before if key(r) == ("S3", "direct")]
    merge_results.main([str(target), str(rerun)])
    assert {key(r) for r in json.loads(target.read_text())["rows"]} == {("S1", "aten"), ("S1", "winograd:f4x4")}


def test_roofline_counts_only_the_taps_that_read_the_image(tmp_path):
    """The FMA side of a row's roofline counts the multiply-adds whose input lies in the image: a
    13x13 filter on a 7x7 plane ('same' padding) reads 49 of its 169 taps per output; without padding
    every tap counts. merge_results --roofline rewrites stored rows with it, at the copy bandwidth
    the file's meta records (the GPU's the rows come from)."""
    import merge_results
    from suites import DEPTHWISE, Layer

    replk = next(layer for layer in DEPTHWISE if layer.name == "replk-1024@7")
    assert replk.useful_flops(2) == 2.0 * 2 * 1024 * 49 * 49 < replk.flops(2)
    valid = Layer("v", 8, 4, 10, 3, padding=0)
    assert valid.useful_flops(3) == valid.flops(3)
    assert bench.roofline(replk, 32, "fwd", "fp32", 2.98)[1] == "memory"
    slow, fast = bench.roofline(replk, 32, "fwd", "fp32", 2.0), bench.roofline(replk, 32, "fwd", "fp32", 4.0)
    assert slow[0] == pytest.approx(2 * fast[0])
    path = tmp_path / "dw.json"
    row = dict(suite="depthwise", layer="replk-1024@7", N=32, C=1024, K=1024, H=7, W=7, R=13, S=13, stride=1,
               padding=6, dilation=1, groups=1024, algorithm="direct", config="default", mode="fwd", weights="frozen",
               dtype="float32", precision="fp32", layout="nchw", ms=0.1, tflops=1.0, cudnn_ms=0.2, ratio=2.0,
               ratio_min=2.0, ratio_max=2.0, rounds=1, spread_flag=False, rel_err=0.0, weight_cache=False,
               bound_ms=1.0, bound="compute")
    assert ROW_KEYS <= set(row)
    meta = {**bench.environment(torch.device("cpu")), "hbm_tbps": 4.1}
    path.write_text(json.dumps({"meta": meta, "rows": [row]}))
    merge_results.main([str(path), "--roofline"])
    stored = json.loads(path.read_text())["rows"][0]
    assert (stored["bound_ms"], stored["bound"]) == bench.roofline(replk, 32, "fwd", "fp32", 4.1)


def test_winograd_error_study_models_the_tensor_core_operands():
    """The study's reduced-precision model: TF32 rounding keeps 10 significand bits; and on a small
    layer F(2x2,3x3) with U and V rounded lands within 2x of the direct convolution's error in TF32
    and beyond it in float16 and bfloat16 (docs/winograd.md: the error bar decides the design); V
    carried as a high and a low part brings float16 and bfloat16 within 2x, U split too to the direct
    convolution's error."""
    import math

    import winograd_error as we

    t = torch.tensor([1.0 + 2.0 ** -10 + 2.0 ** -12, 1.0 + 2.0 ** -11, -3.0])
    assert we.round_operand(t, "tf32").tolist() == [1.0 + 2.0 ** -10, 1.0 + 2.0 ** -10, -3.0]
    gen = torch.Generator().manual_seed(0)
    mats = we.transforms(2, [0.0, 1.0, -1.0])
    ratio = {}
    for precision in ("tf32", "fp16", "bf16"):
        dtype = we.TENSOR_DTYPE[precision]
        x = torch.randn(1, 32, 16, 16, generator=gen).to(dtype).double()
        w = (torch.randn(32, 32, 3, 3, generator=gen) / math.sqrt(288)).to(dtype).double()
        ref = torch.nn.functional.conv2d(x, w, padding=1)
        direct = we.rel_err(we.direct_conv(x, w, 1, precision), ref)
        for split in ("", "v", "uv"):
            y = we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands=precision, split=split)
            ratio[precision + split] = we.rel_err(y.to(dtype), ref) / direct
    assert ratio["tf32"] < 2.0 < ratio["fp16"] and ratio["bf16"] > 2.0, ratio
    assert all(ratio[p + "v"] < 2.0 and ratio[p + "uv"] < 1.1 for p in ("fp16", "bf16")), ratio


def test_winograd_error_study_models_float8_low_parts_and_nested_f2():
    """The study's float8 low part: e4m3 keeps 3 significand bits under a power-of-two scale per group
    (the group's largest value maps within 448, a zero group stays zero, tiny groups underflow
    rather than overflow); V's low part in e4m3 against U in e4m3 corrects as much of V's rounding as
    a float16 low part does. Nested F(2,3) (along rows, a direct sum over filter rows) is exact in
    float64 on partial tiles and H != W, and its float16 error lies between F(2x2,3x3)'s and the direct
    convolution's."""
    import math

    import winograd_error as we

    t = torch.tensor([[3.0 * 2.0 ** -20, 1.0 * 2.0 ** -20, 0.0], [0.0, 0.0, 0.0], [1e-44, 0.0, 0.0]])
    r = we.round_e4m3(t, (1,))
    assert torch.equal(r[0], t[0]) and torch.equal(r[1], t[1]) and torch.isfinite(r).all()
    assert we.round_e4m3(torch.tensor([[1.0 + 2.0 ** -4, 1.0 + 2.0 ** -3]]), (1,)).tolist() == [[1.0, 1.0 + 2.0 ** -3]]
    v = torch.randn(2, 40, 3, 3, 4, 4)
    assert we.e4m3_chunks(v).shape == v.shape
    assert ((we.e4m3_chunks(v) - v).abs() <= v.abs() * 2.0 ** -4).all()

    mats = we.transforms(2, [0.0, 1.0, -1.0])
    x = torch.randn(2, 5, 11, 9, dtype=torch.float64)
    w = torch.randn(7, 5, 3, 3, dtype=torch.float64)
    for pad in (1, 0):
        ref = torch.nn.functional.conv2d(x, w, padding=pad)
        assert we.rel_err(we.nested_rows_conv(x, w, pad, *mats, torch.float64), ref) < 1e-12

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 48, 15, 13, generator=gen).half().double()
    w = (torch.randn(24, 48, 3, 3, generator=gen) / math.sqrt(48 * 9)).half().double()
    ref = torch.nn.functional.conv2d(x, w, padding=1)
    err = lambda y: we.rel_err(y.half(), ref)
    direct = we.rel_err(we.direct_conv(x, w, 1, "fp16"), ref)
    single = err(we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands="fp16"))
    split16 = err(we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands="fp16", split="v"))
    split8 = err(we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands="fp16", split="v8"))
    nested = err(we.nested_rows_conv(x, w, 1, *mats, torch.float32, operands="fp16"))
    assert split8 < 2.0 * direct < single and abs(split8 / split16 - 1.0) < 0.02, (direct, single, split16, split8)
    assert direct < nested < single, (direct, nested, single)


def test_winograd_error_study_models_a_fixed_scale_float8_low_part():
    """The split a kernel can afford without a reduction over a chunk's channels: V's low part in float8
    e5m2 under one fixed power-of-two scale (2 significand bits, saturating at the largest finite value
    rather than overflowing, tiny values flushing to zero), U in e4m3 per (point, filter). On bfloat16
    and float16 inputs of ordinary range it corrects V's rounding as a full low part does, within 2x
    of the direct convolution's error, where the single pass is over it."""
    import math

    import winograd_error as we

    s = we.V_LO_FIXED_SCALE
    t = torch.tensor([1.0 / s, 1.25 / s, 1.375 / s, 1e6, -1e6, 2.0 ** -40, 0.0])
    r = we.round_e5m2_fixed(t)
    assert r[:3].tolist() == [1.0 / s, 1.25 / s, 1.5 / s]  # 2 significand bits, ties to even
    assert r[3].item() == we.E5M2_MAX / s and r[4].item() == -we.E5M2_MAX / s  # saturates
    assert r[5].item() == 0.0 and r[6].item() == 0.0 and torch.isfinite(r).all()

    mats = we.transforms(2, [0.0, 1.0, -1.0])
    gen = torch.Generator().manual_seed(2)
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        x = torch.randn(1, 48, 15, 13, generator=gen).to(dtype).double()
        w = (torch.randn(24, 48, 3, 3, generator=gen) / math.sqrt(48 * 9)).to(dtype).double()
        ref = torch.nn.functional.conv2d(x, w, padding=1)
        err = lambda y: we.rel_err(y.to(dtype), ref)
        direct = we.rel_err(we.direct_conv(x, w, 1, precision), ref)
        single = err(we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands=precision))
        split16 = err(we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands=precision, split="v"))
        fixed = err(we.winograd_conv(x, w, 1, 2, *mats, torch.float32, operands=precision, split="v8f"))
        assert fixed < 2.0 * direct < single and abs(fixed / split16 - 1.0) < 0.02, (precision, direct, single, fixed)


def test_winograd_error_study_models_both_low_parts_in_float8():
    """Both operands split, each low part against the other operand and all four float8 operands in
    e4m3 (V's under a scale per (point, tile) over all channels, U's per (point, filter)): float16 and
    bfloat16 F(4x4,3x3) at the mixed points land within 1.2x of the direct convolution's error, where
    the single pass is beyond 2x and V split alone stays beyond it (U's rounding counts as much)."""
    import math

    import winograd_error as we

    assert we.SPLITS["f4x4-mixed-split-uv8"] == ("f4x4-mixed", "uv8")
    m, points = we.VARIANTS["f4x4-mixed"]
    mats = we.transforms(m, points)
    gen = torch.Generator().manual_seed(3)
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        x = torch.randn(1, 64, 17, 14, generator=gen).to(dtype).double()
        w = (torch.randn(24, 64, 3, 3, generator=gen) / math.sqrt(64 * 9)).to(dtype).double()
        ref = torch.nn.functional.conv2d(x, w, padding=1)
        err = lambda split: we.rel_err(
            we.winograd_conv(x, w, 1, m, *mats, torch.float32, operands=precision, split=split).to(dtype), ref)
        direct = we.rel_err(we.direct_conv(x, w, 1, precision), ref)
        both8, v_only, single = err("uv8"), err("v"), err("")
        assert both8 < 1.2 * direct and 2.0 * direct < v_only < single, (precision, direct, both8, v_only, single)


def test_winograd_error_study_models_int8_limbs_and_heavy_tailed_inputs():
    """U and V as 16-bit fixed point in two int8 limbs (exact integer sums): the limbs fit int8 and
    rebuild each rounded value, a group's largest at 32639. On Gaussian inputs float16 F(4x4,3x3) at
    the mixed points with four int8 products keeps within the 2x error bar (three do not); on
    heavy-tailed inputs (log-normal scales per channel and per value) the fixed point's resolution,
    set by a group's largest value, puts it past the bar, where the float8 low parts (uv8) stay
    within 1.2x of the direct convolution's error on both."""
    import math

    import winograd_error as we

    assert we.SPLITS["f4x4-mixed-split-s8x2-ll"] == ("f4x4-mixed", "s8x2-ll")
    t = torch.randn(3, 50, 7, generator=torch.Generator().manual_seed(5))
    hi, lo, scale = we.s8x2_parts(t, (1,))
    q = torch.round(t * scale).double()
    assert torch.equal(256 * hi + lo, q) and hi.abs().max() <= 127 and -128 <= lo.min() and lo.max() <= 127
    assert torch.equal(q.abs().amax(1), torch.full((3, 7), float(we.S8X2_Q_MAX), dtype=torch.float64))
    m, points = we.VARIANTS["f4x4-mixed"]
    mats = we.transforms(m, points)
    gen = torch.Generator().manual_seed(4)
    ratios = {}
    for inputs in ("randn", "heavy"):
        with torch.random.fork_rng():
            torch.manual_seed(4)
            x = we.INPUTS[inputs](1, 256, 14).to(torch.float16).double()
        w = (torch.randn(32, 256, 3, 3, generator=gen) / math.sqrt(256 * 9)).to(torch.float16).double()
        ref = torch.nn.functional.conv2d(x, w, padding=1)
        direct = we.rel_err(we.direct_conv(x, w, 1, "fp16"), ref)
        ratios[inputs] = {split: we.rel_err(we.winograd_conv(
            x, w, 1, m, *mats, torch.float32, operands="fp16", split=split).to(torch.float16), ref) / direct
            for split in ("s8x2", "s8x2-ll", "uv8")}
    assert ratios["randn"]["s8x2-ll"] < 2.0 < ratios["randn"]["s8x2"], ratios
    assert ratios["heavy"]["s8x2-ll"] > 2.0 > 1.2 > max(ratios["randn"]["uv8"], ratios["heavy"]["uv8"]), ratios


@pytest.mark.parametrize("renderer, result", [
    ("render_staged_v_bound", "staged-v-bound-h100"),
    ("render_staged_v_bound", "staged-v-bound-h200"),
    ("render_input_staging_bound", "input-staging-bound-h200"),
    ("render_wgmma_rate", "wgmma-rate-h200"),
    ("render_cluster_placement", "cluster-placement-h200"),
])
def test_micro_benchmark_markdown_is_rendered_from_its_json(capsys, renderer, result):
    """Each stand-alone micro-benchmark's Markdown in benchmarks/results is what its renderer in
    benchmarks/micro makes of the JSON beside it (the staged-V reduction replayed,
    benchmarks/micro/staged_v_bound.cu; the NCHW input staged by tensor copies,
    benchmarks/micro/input_staging_bound.cu; the wgmma rates, benchmarks/micro/wgmma_rate.cu; where
    clusters put their blocks, benchmarks/micro/cluster_placement.cu)."""
    import importlib.util

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
    spec = importlib.util.spec_from_file_location(renderer, os.path.join(root, "micro", renderer + ".py"))
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    render.main(os.path.join(root, "results", result + ".json"))
    with open(os.path.join(root, "results", result + ".md")) as f:
        assert capsys.readouterr().out == f.read()


def test_winograd_half_bound_is_current_and_under_every_measured_time(tmp_path):
    """benchmarks/results/winograd-half-bound-h200 is what benchmarks/winograd_half_bound.py counts from
    the committed wgmma rates and resnet-yolo rows, and the count is a lower bound where it can be
    checked: bfloat16 calls' tiles today, by their rows' plans (the staged-V tile, `staged-carrier`; the
    single wgmma block, `n32-tf32`; the F(4x4) cluster, `staged-f4x4-carrier`; float16 calls run
    mma.sync tiles the count does not model) never ran faster than their bound counted without
    multicast, which none of them uses."""
    import math

    import winograd_half_bound as hb

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "results")
    out = str(tmp_path / "bound")
    assert hb.main(["--gpu", "h200", "--out", out]) is None
    with open(out + ".md") as f, open(os.path.join(root, "winograd-half-bound-h200.md")) as g:
        assert f.read() == g.read()
    with open(out + ".json") as f, open(os.path.join(root, "winograd-half-bound-h200.json")) as g:
        data, committed = json.load(f), json.load(g)

    def same(a, b):  # the last digits of a float may differ between machines' math libraries
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, float):
            return math.isclose(a, b, rel_tol=1e-9)
        return a == b

    assert same(data, committed)
    designs = {"f4x4:tf32-wgmma-cluster/": "staged-f4x4-carrier",
               "fused:tf32-wgmma-cluster-vbulk/": "staged-carrier", "fused:tf32-wgmma/": "n32-tf32"}
    for row in data["precisions"]["bf16"]["rows"]:
        (today,) = [d for tile, d in designs.items() if row["plan"].startswith("forward:" + tile)]
        assert row["ours_us"] >= row["designs_unicast"][today]["bound_us"] >= row["designs"][today]["bound_us"], \
            row["layer"]


def test_winograd_half_bound_counts_f4x4_with_float8_low_parts_for_float16():
    """The count's F(4x4) design for float16 (both operands split, low parts in float8, one
    accumulator: the error study's `f4x4-mixed-split-uv8`) is within float16's error bar, where the
    carriers are not; it does about twice the carrier design's MMA work (one 16-bit product and two float8
    ones at twice the rate) and moves twice its bytes, so it is never counted faster."""
    import winograd_half_bound as hb

    assert hb.DESIGNS["staged-f4x4-split-uv8"][4] == "split-uv8" and "fp16" in hb.PRODUCTS["split-uv8"][2]
    assert "fp16" not in hb.PRODUCTS["carrier"][2]
    rates = json.load(open(os.path.join(os.path.dirname(hb.__file__), "results", "wgmma-rate-h200.json")))
    for C, K, HW in ((128, 256, 68), (512, 1024, 17)):
        bounds = hb.pass_bounds(C, K, HW, HW, rates, rates["sms"], 0.0)
        uv8, carrier = bounds["staged-f4x4-split-uv8"], bounds["staged-f4x4-carrier"]
        assert uv8["mma_us"] == pytest.approx(2 * carrier["mma_us"], rel=0.1)  # measured rates, not the peaks
        assert uv8["intake_us"] == pytest.approx(2 * carrier["intake_us"])
        assert uv8["bound_us"] > carrier["bound_us"]


def test_winograd_half_bound_counts_int8_limbs_outside_float16s_error_bar():
    """The int8-limb designs (U and V as two int8 limbs, `staged-s8x2` and `staged-f4x4-s8x2-ll`)
    move the carriers' bytes (two a value: the same L2 intake as `staged-f4x4-carrier`, whose
    16-bit products they replace by four int8 ones at the e4m3 rate), but their error holds float16's
    bar only on Gaussian inputs (winograd-error-cpu-heavy): the count keeps them within bfloat16's
    bar alone."""
    import winograd_half_bound as hb

    for design in ("staged-s8x2", "staged-f4x4-s8x2-ll"):
        assert hb.PRODUCTS[hb.DESIGNS[design][4]][2] == ("bf16",)
    rates = json.load(open(os.path.join(os.path.dirname(hb.__file__), "results", "wgmma-rate-h200.json")))
    e4m3_per_bf16 = hb.rate_tflops(rates, "e4m3-ss", 64) / hb.rate_tflops(rates, "bf16-ss", 64)
    assert hb.rate_tflops(rates, "s8-ss", 64) == hb.rate_tflops(rates, "e4m3-ss", 64)
    for C, K, HW in ((128, 256, 68), (512, 1024, 17)):
        bounds = hb.pass_bounds(C, K, HW, HW, rates, rates["sms"], 0.0)
        limbs, carrier = bounds["staged-f4x4-s8x2-ll"], bounds["staged-f4x4-carrier"]
        assert limbs["intake_us"] == pytest.approx(carrier["intake_us"])
        assert limbs["mma_us"] == pytest.approx(4 / e4m3_per_bf16 * carrier["mma_us"])
        assert limbs["bound_us"] > carrier["bound_us"]


def test_patch_load_model_counts_the_kernels_lane_map():
    """benchmarks/micro/patch_load_model.py, the count docs/winograd.md quotes for the single wgmma block's
    NCHW patch loads: the kernel's lane map (4 channels x 8 tiles a warp) conflict-free on V's stores,
    shuffles cutting its L1 lines, and a one-channel warp touching fewer lines but paying in bank
    conflicts."""
    import importlib.util

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
    path = os.path.join(root, "micro", "patch_load_model.py")
    spec = importlib.util.spec_from_file_location("patch_load_model", path)
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    kernel_map = model.LANE_MAPS["4 channels x 8 tiles (the kernel's)"]
    one_channel = model.LANE_MAPS["1 channel x 32 tiles"]
    every_patch = [(c, t) for c in range(16) for t in range(32)]
    assert sorted(kernel_map(w, lane) for w in range(16) for lane in range(32)) == every_patch
    loads, lines, sectors, shuffles, stores = model.chunk_counts(kernel_map, 68, 68, 0, shuffles=False)
    assert (lines, shuffles, stores) == (824, 0, 256)  # Y8: 16 stores a thread, no conflicts
    _, lines_shfl, _, shuffles, _ = model.chunk_counts(kernel_map, 68, 68, 0, shuffles=True)
    assert (lines_shfl, shuffles) == (544, 128)
    _, lines_one, _, _, stores_one = model.chunk_counts(one_channel, 68, 68, 0, shuffles=False)
    assert lines_one < lines and stores_one == 4 * stores


def test_test_shards_partition_the_suite():
    """TORCHCONV_TEST_SHARD=k/n (tests/conftest.py; gpu_session.sh's PYTEST_SHARDS) keeps the collected
    tests whose id's CRC-32 is k modulo n: the n shards together are the suite, each test in one of
    them, in the suite's order; anything else than k/n with 0 <= k < n is a usage error that names
    the variable."""
    import subprocess

    tests = os.path.dirname(os.path.abspath(__file__))

    def collect(shard=None):
        env = {k: v for k, v in os.environ.items() if k != "TORCHCONV_TEST_SHARD"}
        if shard is not None:
            env["TORCHCONV_TEST_SHARD"] = shard
        run = subprocess.run([sys.executable, "-m", "pytest", os.path.join(tests, "test_errors.py"), "--co", "-q",
                              "-p", "no:cacheprovider"], cwd=os.path.dirname(tests), env=env, capture_output=True,
                             text=True)
        return [line for line in run.stdout.splitlines() if "::" in line], run

    whole, _ = collect()
    shards = [collect(f"{k}/3")[0] for k in range(3)]
    assert whole and all(shards) and sorted(sum(shards, [])) == sorted(whole)
    assert shards[1] == [t for t in whole if zlib.crc32(t.encode()) % 3 == 1]
    for bad in ("3/3", "one/3"):
        _, run = collect(bad)
        assert run.returncode != 0 and "TORCHCONV_TEST_SHARD" in run.stdout + run.stderr


def test_trial_rows_markdown_is_rendered_from_its_json_and_each_variant_is_a_run(tmp_path):
    """benchmarks/results/gemm-trials-h200 (variants of the GEMM that did not land, and the one that
    did, each timed by pass_times.py with cuDNN in the same process): its Markdown is what
    benchmarks/trial_rows.py renders of its JSON, and every row carries its variant, precision,
    layout and the cuDNN time of its own run."""
    import trial_rows

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "results")
    out = str(tmp_path / "trials.md")
    trial_rows.main(["--render", os.path.join(root, "gemm-trials-h200.json"), "--markdown", out])
    with open(out) as f, open(os.path.join(root, "gemm-trials-h200.md")) as g:
        assert f.read() == g.read()
    with open(os.path.join(root, "gemm-trials-h200.json")) as f:
        data = json.load(f)
    names = {v["name"] for v in data["variants"]}
    assert {"pipeline-before", "pipeline-main", "pipeline-deep", "gw-gather-8-threads"} <= names
    for row in data["rows"]:
        assert row["variant"] in names and row["precision"] in ("bf16", "fp16", "tf32")
        assert row["layout"] in ("nchw", "nhwc") and row["cudnn_us"] > 0 and row["us"] > 0
