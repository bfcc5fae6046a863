"""st_lite.py — the safetensors format read and written with numpy alone (no `safetensors`
package), for the tests that check ringmaster's exports against Python (docs/models-and-data.md,
"Exported models"): an 8-byte little-endian header length, a JSON header, then the tensors'
little-endian row-major bytes tiling the data buffer. bfloat16 has no numpy type: it is read as
float32 (exactly) and written rounded to nearest even."""
import json
import struct

import numpy as np

_NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
       "I8": "i1", "U8": "u1", "BOOL": "?"}


def load(path):
    """{name: numpy array} (BF16 as float32) and the __metadata__ dict."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError("%s: header of %d bytes past the end of the file" % (path, n))
    head = json.loads(buf[8:8 + n])
    meta = head.pop("__metadata__", {})
    data, out, end = buf[8 + n:], {}, 0
    for name, t in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        if b != end:
            raise ValueError("%s: tensor %s starts at %d, not %d" % (path, name, b, end))
        end = e
        raw = data[b:e]
        if t["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, _NP[t["dtype"]])
        if a.size != int(np.prod(t["shape"], dtype=np.int64)):
            raise ValueError("%s: tensor %s holds %d elements, shape %s" % (path, name, a.size, t["shape"]))
        out[name] = a.reshape(t["shape"]).copy()
    if end != len(data):
        raise ValueError("%s: %d bytes of data, the tensors cover %d" % (path, len(data), end))
    return out, meta


def save(path, tensors, meta=None, bf16=False):
    """Write {name: array-like} (float arrays as F32, or BF16 with bf16=True; integer arrays as
    they are) in the order given, with __metadata__ meta (default {"format": "pt"})."""
    head, blobs, at = {"__metadata__": meta or {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a)
        a = np.ascontiguousarray(a).reshape(a.shape)  # (0-d stays 0-d)
        if a.dtype.kind == "f" and bf16:
            u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
            raw, dt = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes(), "BF16"
        elif a.dtype.kind == "f":
            raw, dt = a.astype("<f4").tobytes(), "F32"
        else:
            dt = {v: k for k, v in _NP.items()}[a.dtype.newbyteorder("<").str if a.dtype.itemsize > 1 else a.dtype.str]
            raw = a.tobytes()
        head[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    js = json.dumps(head, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))
