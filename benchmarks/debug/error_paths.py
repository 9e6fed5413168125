"""Which C++ error paths crash on this torch build? Each case runs in its own subprocess."""
import subprocess
import sys

CASES = {
    "value_bias_shape_autograd": "torch.ops.torchconv.conv2d_direct(X, W, torch.randn(5), [1,1], [0,0], [1,1], 1)",
    "value_bias_shape_nograd": "with torch.no_grad(): torch.ops.torchconv.conv2d_direct(X, W, torch.randn(5), [1,1], [0,0], [1,1], 1)",
    "value_groups": "torch.ops.torchconv.conv2d_direct(X, W, None, [1,1], [0,0], [1,1], 3)",
    "value_stride": "torch.ops.torchconv.conv2d_gemm(X, W, None, [0,0], [0,0], [1,1], 1)",
    "type_weight_dtype": "torch.ops.torchconv.conv2d_direct(X, W.double(), None, [1,1], [0,0], [1,1], 1)",
    "value_workspace": "torchconv._C.set_workspace_limit(0)",
    "torch_value_error": "torch.nn.functional.pad(X, [1], mode='reflect')",
}
PRE = "import torch, torchconv; X = torch.randn(2, 4, 8, 8); W = torch.randn(6, 4, 3, 3)\n"
for name, code in CASES.items():
    src = PRE + "try:\n    " + code.replace("\n", "\n    ") + "\nexcept Exception as e:\n    print(type(e).__name__, str(e).splitlines()[0][:100])\n"
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True)
    print(f"{name:<28} rc={r.returncode:<4} {r.stdout.strip()[:140]} {r.stderr.strip().splitlines()[-1][:100] if r.stderr.strip() else ''}")
    if r.returncode < 0 and len(sys.argv) > 1:
        open("/tmp/crash.py", "w").write(src)
        g = subprocess.run(["cuda-gdb", "-batch", "-ex", "run", "-ex", "bt 25", "--args", sys.executable, "/tmp/crash.py"],
                           capture_output=True, text=True, timeout=300)
        print("\n".join(l for l in g.stdout.splitlines() if l.startswith("#") or "SIG" in l)[:6000])
        sys.argv = sys.argv[:1]
