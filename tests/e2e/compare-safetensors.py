#!/usr/bin/python3
# compare-safetensors.py A B TOL: the two safetensors files hold the same tensor names and shapes,
# and every tensor agrees within TOL in the norm docs/models-and-data.md fixes for comparisons,
# ||a - b|| / ||b||. Exit 1 (naming the tensor) otherwise; prints the largest difference.
import sys, json, struct, numpy as np
def load(p):
    b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]
    out={}
    for k,v in h.items():
        if k=='__metadata__': continue
        s,e=v['data_offsets']; out[k]=np.frombuffer(d[s:e],dtype=np.float32).reshape(v['shape'])
    return out
a=load(sys.argv[1]); b=load(sys.argv[2]); tol=float(sys.argv[3])
assert sorted(a)==sorted(b), (sorted(a), sorted(b))
worst=0
for k in a:
    assert a[k].shape==b[k].shape, k
    r=np.linalg.norm(a[k].astype(np.float64)-b[k])/max(np.linalg.norm(b[k].astype(np.float64)),1e-30)
    worst=max(worst,r)
    if r>tol: print("tensor %s: relative difference %.3g > %g"%(k,r,tol)); sys.exit(1)
print("max relative difference %.3g over %d tensors"%(worst,len(a)))
