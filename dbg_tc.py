import torch, torch.nn.functional as F, torchconv
torch.manual_seed(0)
def run(N,C,K,H,W,R,stride,pad, dt=torch.float16):
    x=torch.randn(N,C,H,W,device='cuda').to(dt).contiguous(memory_format=torch.channels_last)
    w=(torch.randn(K,C,R,R,device='cuda')/ (C*R*R)**0.5).to(dt)
    y=torchconv.conv2d(x,w,None,stride,pad,algorithm='gemm')
    ch=torchconv.last_choice()
    ref=F.conv2d(x.double(),w.double(),None,stride,pad)
    e=(y.double()-ref).norm()/ref.norm()
    print(f"N{N}C{C}K{K}H{H}W{W}R{R}s{stride}p{pad} {dt} err {e:.2e} {ch}")
    if e>1e-2:
        d=(y.double()-ref).abs()
        print('  per out channel max err', d.amax((0,2,3)).tolist()[:8])
        print('  per row max err', d.amax((0,1,3)).tolist()[:8])
        print('  y', y[0,:4,0,:4].tolist()); print('  ref', ref[0,:4,0,:4].tolist())
for C in (8,3,16):
  for R in (1,3):
    run(1,C,16,4,4,R,1,R//2)
run(2,3,16,15,14,7,2,3)
run(2,8,16,15,14,7,2,3)
torch.backends.cudnn.allow_tf32=True
run(1,4,16,4,4,1,1,0,torch.float32)
run(1,3,16,4,4,1,1,0,torch.float32)
