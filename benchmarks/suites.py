"""The public layer suites. Padding is dilation * (R // 2) unless stated."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    K: int
    C: int
    HW: int
    R: int
    stride: int = 1
    padding: int = None  # None: dilation * (R // 2)
    N: int = None  # None: taken from --batch
    groups: int = 1
    dilation: int = 1

    @property
    def pad(self):
        return self.dilation * (self.R // 2) if self.padding is None else self.padding

    def out_hw(self):
        return (self.HW + 2 * self.pad - self.dilation * (self.R - 1) - 1) // self.stride + 1

    def flops(self, n):
        ho = self.out_hw()
        return 2.0 * n * self.K * (self.C // self.groups) * self.R * self.R * ho * ho


# Seed 001, Table 9.1: (K, C, H=W, R=S, stride).
RESNET = [
    Layer("R1", 64, 3, 224, 7, 2),
    Layer("R2", 64, 64, 56, 3, 1),
    Layer("R3", 64, 64, 56, 1, 1),
    Layer("R4", 128, 64, 56, 3, 2),
    Layer("R5", 128, 64, 56, 1, 2),
    Layer("R6", 128, 128, 28, 3, 1),
    Layer("R7", 256, 128, 28, 3, 2),
    Layer("R8", 256, 128, 28, 1, 1),
    Layer("R9", 256, 256, 14, 3, 1),
    Layer("R10", 512, 512, 14, 3, 2),
    Layer("R11", 512, 256, 14, 1, 2),
    Layer("R12", 512, 512, 7, 3, 1),
]

# Seed 001, YOLO layers (stride 1).
YOLO = [
    Layer("Y0", 32, 3, 544, 3),
    Layer("Y2", 64, 32, 272, 3),
    Layer("Y4", 128, 64, 136, 3),
    Layer("Y5", 64, 128, 136, 1),
    Layer("Y8", 256, 128, 68, 3),
    Layer("Y9", 128, 256, 68, 1),
    Layer("Y12", 512, 256, 34, 3),
    Layer("Y13", 256, 512, 34, 1),
    Layer("Y18", 1024, 512, 17, 3),
    Layer("Y19", 512, 1024, 17, 1),
]

# The 3x3 stride-1 layers of both suites (Winograd's shapes; the Winograd issue's bar is over these).
WINOGRAD = [layer for layer in YOLO + RESNET if layer.R == 3 and layer.stride == 1]

# Seed 000: N = 1, C = K = 64, 4096 x 4096, valid convolution.
BIG = [Layer(f"big{r}", 64, 64, 4096, r, 1, padding=0, N=1) for r in (3, 9, 13)]

# A tiny suite that runs in seconds on a CPU (the harness's smoke test).
SMOKE = [Layer("S1", 8, 4, 16, 3), Layer("S2", 16, 8, 12, 1), Layer("S3", 8, 8, 15, 5, 2)]

SUITES = {"resnet": RESNET, "yolo": YOLO, "winograd": WINOGRAD, "big": BIG, "smoke": SMOKE}
