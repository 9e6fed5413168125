"""The public layer suites. Padding is dilation * (kernel // 2) per axis unless stated."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    K: int
    C: int
    HW: int
    R: int
    stride: int = 1
    padding: object = None  # None: dilation * (kernel // 2) per axis; an int or (pad_h, pad_w)
    N: int = None  # None: taken from --batch
    groups: int = 1
    dilation: int = 1
    S: int = None  # None: R (square filter)

    @property
    def kw(self):
        return self.R if self.S is None else self.S

    @property
    def pads(self):
        if self.padding is None:
            return self.dilation * (self.R // 2), self.dilation * (self.kw // 2)
        return tuple(self.padding) if isinstance(self.padding, tuple) else (self.padding, self.padding)

    @property
    def pad(self):
        ph, pw = self.pads
        return ph if ph == pw else (ph, pw)

    def out_hw(self):
        return (self.HW + 2 * self.pads[0] - self.dilation * (self.R - 1) - 1) // self.stride + 1

    def out_w(self):
        return (self.HW + 2 * self.pads[1] - self.dilation * (self.kw - 1) - 1) // self.stride + 1

    def flops(self, n):
        return 2.0 * n * self.K * (self.C // self.groups) * self.R * self.kw * self.out_hw() * self.out_w()

    def useful_flops(self, n):
        """flops() without the products whose input lies in the zero padding (a large filter on a
        small plane: RepLKNet's 13x13 on 7x7 reads the image through 49 of its 169 taps per output)."""
        def reads(size, out, taps, pad):
            return sum(0 <= o * self.stride - pad + t * self.dilation < size for o in range(out) for t in range(taps))
        return (2.0 * n * self.K * (self.C // self.groups) * reads(self.HW, self.out_hw(), self.R, self.pads[0])
                * reads(self.HW, self.out_w(), self.kw, self.pads[1]))

    def bytes(self, n, mode, elem=4):
        """Bytes each tensor moves once: x, w and y forward; forward + backward adds grad_output
        twice (grad_input and grad_weight), x again (grad_weight), grad_input and grad_weight."""
        x = n * self.C * self.HW * self.HW
        w = self.K * (self.C // self.groups) * self.R * self.kw
        y = n * self.K * self.out_hw() * self.out_w()
        return elem * (x + w + y if mode == "fwd" else 2 * x + 2 * w + 3 * y + x)


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

# torchvision ResNet-50's 1x1 bottleneck layers on 56 x 56 that RESNET (seed 001's table) lacks: the
# short reductions to and from 256 channels (the 16-bit rule's warp-specialized tile).
RESNET50_1X1 = [
    Layer("l1.conv3", 256, 64, 56, 1),  # layer1 conv3 and downsample: 64 -> 256
    Layer("l1.conv1", 64, 256, 56, 1),  # layer1.1 and .2 conv1: 256 -> 64
    Layer("l2.0.conv1", 128, 256, 56, 1),  # layer2.0 conv1: 256 -> 128 (its conv2 strides)
]

# A tiny suite that runs in seconds on a CPU (the harness's smoke test).
SMOKE = [Layer("S1", 8, 4, 16, 3), Layer("S2", 16, 8, 12, 1), Layer("S3", 8, 8, 15, 5, 2)]

# Depthwise and small-group layers of real architectures (groups == C unless stated).
DEPTHWISE = [
    Layer("mbv2-144@56", 144, 144, 56, 3, groups=144),  # MobileNetV2 block 3
    Layer("mbv2-96@112s2", 96, 96, 112, 3, 2, groups=96),  # MobileNetV2 block 2, strided
    Layer("mbv3-72@56s2", 72, 72, 56, 5, 2, groups=72),  # MobileNetV3-L 5x5 stride 2
    Layer("mbv3-960@7", 960, 960, 7, 5, groups=960),  # MobileNetV3-L last 5x5
    Layer("effb0-240@28", 240, 240, 28, 5, groups=240),  # EfficientNet-B0 stage 4
    Layer("effb0-672@14", 672, 672, 14, 5, groups=672),  # EfficientNet-B0 stage 6
    Layer("cnxt-96@56", 96, 96, 56, 7, groups=96),  # ConvNeXt-T stage 1
    Layer("cnxt-384@14", 384, 384, 14, 7, groups=384),  # ConvNeXt-T stage 3
    Layer("replk-128@56", 128, 128, 56, 31, groups=128),  # RepLKNet-31B stage 1
    Layer("replk-512@14", 512, 512, 14, 27, groups=512),  # RepLKNet-31B stage 3
    Layer("replk-1024@7", 1024, 1024, 7, 13, groups=1024),  # RepLKNet-31B stage 4
    Layer("slak-128@56", 128, 128, 56, 51, padding=(25, 2), groups=128, S=5),  # SLaK 51x5
    Layer("rnx-128@56", 128, 128, 56, 3, groups=32),  # ResNeXt-50 32x4d stage 1: 4 channels per group
]

SUITES = {"resnet": RESNET, "yolo": YOLO, "winograd": WINOGRAD, "big": BIG, "smoke": SMOKE,
          "depthwise": DEPTHWISE, "resnet50-1x1": RESNET50_1X1}
