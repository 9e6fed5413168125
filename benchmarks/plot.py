"""Plots of committed benchmark results: TFLOP/s per layer for each algorithm and cuDNN, with the
FP32 peak as a line, one PNG per suite, batch and mode.

  python benchmarks/plot.py benchmarks/results/{direct-v2-resnet-yolo,csg,gemm,winograd}-h100.json \\
      --out-dir benchmarks/results/plots

Rows of the same (suite, layer, N, mode, algorithm) from several files are taken from the last file
that has them, so cuDNN is the one timed alongside that file's algorithm.
"""
import argparse
import json
import os


def load(paths):
    rows, peak, gpu = {}, None, None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        peak = data["meta"].get("fp32_peak_tflops") or peak
        gpu = data["meta"].get("gpu") or gpu
        for r in data["rows"]:
            if r.get("suite") and r.get("tflops"):
                suite = r["suite"]
                if suite == "winograd":  # the resnet / yolo layers Winograd can do, under their own names
                    suite = "resnet" if r["layer"].startswith("R") else "yolo"
                rows[(suite, r["layer"], r["N"], r["mode"], r["algorithm"])] = r
    return rows, peak, gpu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--modes", default="fwd,fwdbwd")
    p.add_argument("--variants", action="store_true", help="also plot non-default variants ('gemm:explicit', ...)")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, peak, gpu = load(args.results)
    if not args.variants:
        rows = {k: v for k, v in rows.items() if ":" not in k[4]}
    os.makedirs(args.out_dir, exist_ok=True)
    groups = sorted({(s, n, m) for s, _, n, m, _ in rows if m in args.modes.split(",")})
    written = []
    for suite, n, mode in groups:
        layers = []
        for s, layer, nn_, m, _ in rows:
            if (s, nn_, m) == (suite, n, mode) and layer not in layers:
                layers.append(layer)
        algos = sorted({a for s, _, nn_, m, a in rows if (s, nn_, m) == (suite, n, mode)},
                       key=lambda a: (a != "cudnn", a))
        fig, ax = plt.subplots(figsize=(min(18, max(8, 0.35 * len(layers) * len(algos))), 4.5))
        width = 0.8 / len(algos)
        for i, algo in enumerate(algos):
            xs, ys = [], []
            for j, layer in enumerate(layers):
                r = rows.get((suite, layer, n, mode, algo))
                if r is not None:
                    xs.append(j + (i - (len(algos) - 1) / 2) * width)
                    ys.append(r["tflops"])
            ax.bar(xs, ys, width, label=algo, color="black" if algo == "cudnn" else None)
        if peak:
            ax.axhline(peak, color="red", linestyle="--", linewidth=1, label=f"FP32 peak {peak} TFLOP/s")
        ax.set_xticks(range(len(layers)))
        ax.set_xticklabels(layers)
        ax.set_ylabel("TFLOP/s")
        what = "forward" if mode == "fwd" else "forward + backward"
        ax.set_title(f"{suite} layers, N = {n}, {what} — {gpu}")
        ax.legend(fontsize=8, ncol=min(len(algos) + 1, 4))
        fig.tight_layout()
        path = os.path.join(args.out_dir, f"{suite}-N{n}-{mode}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    print("\n".join(written))


if __name__ == "__main__":
    main()
