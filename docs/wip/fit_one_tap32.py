"""Session diagnostic: fits the TF32 1x1 split terms (docs/wip/one-tap32-terms.patch) to
split_sweep.py JSONs of the TF32 NCHW 1x1 layers (sweep-tf32-nchw-n{1,8,16,32}.json in the current
folder; --configs wgmma-large,wgmma-wide --splits 1,2,3,4,8 --plain --layers R11,Y19,Y13,R8,Y9) and
prints each pass's model pick against the best forced launch and the rule."""
import json, math, os
import numpy as np
cd=lambda a,b:-(-a//b)
# The H200's clusters of each size held at once, two and one block an SM (cluster_placement.cu)
_placement = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks",
                                         "results", "cluster-placement-h200.json")))
two={c["size"]: c["clusters_two_an_sm"] for c in _placement["capacity"]}
one={c["size"]: c["clusters_one_an_sm"] for c in _placement["capacity"]}
L={'R11':(256,512,14,2),'Y19':(1024,512,17,1),'Y13':(512,256,34,1),'R8':(128,256,28,1),'Y9':(256,128,68,1)}
data=[]
for n in (1,8,16,32):
  rs=json.load(open(f'sweep-tf32-nchw-n{n}.json'))
  for name,(C,K,HW,st) in L.items():
    for p in ('fwd','gi'):
      d={r['label']:r['us'] for r in rs if r['layer']==name and r['pass_']==p}
      P=HW//st
      if p=='fwd': rows=n*P*P; ch=cd(C,32); outs=K
      else: rows=n*HW*HW; ch=cd(K,32); outs=C
      if p=='gi' and st==2: continue
      for k,v in d.items():
        if k in ('rule','oldrule'): continue
        cfg=k.split('/')[0].replace('wgmma-',''); s=int(k.split('/s')[1])
        bn=128 if cfg=='large' else 256
        if bn==256 and outs<=128: continue
        bl=cd(rows,128)*cd(outs,bn)
        s_eff=cd(ch,cd(ch,s))
        data.append(dict(n=n,layer=name,p=p,cfg=cfg,s=s_eff,ch=ch,bl=bl,us=v,label=k,key=(n,name,p)))
def feats(r):
    # returns (waves, chunks per split, lone, wide) under the launch's rules
    s=r['s']; bl=r['bl']; wide=r['cfg']=='wide'
    per=cd(r['ch'],s)
    if s==1:
        slots=132 if wide else 264
        waves=cd(bl,slots); lone = wide or bl<=132
    else:
        cap=(one if wide else two)[s]
        if cd(bl,cap)>cd(bl*s, 132 if wide else 264): return None   # would not run as clusters
        waves=cd(bl,cap); lone = wide or bl<one[s]
    return waves,per,lone,wide
def model(x,f):
    a,pl,cw,F,Fw=x
    waves,per,lone,wide=f
    if wide: return a*waves*(per*cw+Fw)
    return a*waves*(per*(pl if lone else 1.0)+F)
rows=[(r,feats(r)) for r in data]; rows=[(r,f) for r,f in rows if f]
best=None
for pl in np.arange(0.3,1.01,0.05):
  for cw in np.arange(0.4,1.6,0.05):
    for F in np.arange(1,20,0.5):
      for Fw in np.arange(1,24,1):
        # a by least squares in log space
        m=np.array([model((1,pl,cw,F,Fw),f) for r,f in rows]); y=np.array([r['us'] for r,f in rows])
        la=np.mean(np.log(y)-np.log(m)); err=np.sqrt(np.mean((np.log(y)-np.log(m)-la)**2))
        if best is None or err<best[0]: best=(err,math.exp(la),pl,cw,F,Fw)
print("rms log err %.3f a=%.3f pl=%.2f cw=%.2f F=%.1f Fw=%.0f"%best)
err,a,pl,cw,F,Fw=best
x=(a,pl,cw,F,Fw)
keys=sorted(set(r['key'] for r,f in rows))
hit=0
for k in keys:
    c=[(model(x,f),r) for r,f in rows if r['key']==k]
    pick=min(c,key=lambda t:t[0])[1]; bestm=min((r for _,r in c),key=lambda r:r['us'])
    rs=json.load(open(f'sweep-tf32-nchw-n{k[0]}.json')); rule=[q['us'] for q in rs if q['layer']==k[1] and q['pass_']==k[2] and q['label']=='rule'][0]
    print(f"{k} model pick {pick['label']} {pick['us']:.1f} | best {bestm['label']} {bestm['us']:.1f} | rule {rule:.1f}")
