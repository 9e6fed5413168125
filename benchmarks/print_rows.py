"""Prints the rows of a result file at one precision and layout (a device session's short table).

    python benchmarks/print_rows.py results.json --precision tf32 --layout nchw [--algorithm gemm]
"""
import argparse
import json


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--layout", default="nchw")
    p.add_argument("--algorithm", default="gemm")
    args = p.parse_args(argv)
    rows = json.load(open(args.path))["rows"]
    for r in rows:
        if (r.get("precision", "fp32"), r.get("layout", "nchw"), r["algorithm"]) != (args.precision, args.layout,
                                                                                   args.algorithm):
            continue
        ref = r.get("reference_rel_err") or 0.0
        print(f"{r['layer']:>4} N={r['N']:<3} {r['mode']:<7} {r.get('config', '')!s:<24} ratio {r['ratio']:.2f} "
              f"[{r.get('ratio_min', 0):.2f}-{r.get('ratio_max', 0):.2f}] {r['tflops']:6.1f} TF/s "
              f"err {r['rel_err']:.1e} cudnn {ref:.1e}")


if __name__ == "__main__":
    main()
