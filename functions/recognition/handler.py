"""recognition (FaaSnap Table 2): classify an image with a convolutional network.

No model is downloaded: the network is a small CNN implemented in numpy whose
weights are generated deterministically from a fixed seed when the handler is
imported (before the snapshot), He-initialized and NOT trained, so the predicted
class is meaningless; the work per image (decode, resize, three conv + ReLU +
max-pool layers, two dense layers, softmax) is what the benchmark measures.

Network (input 128 x 128 x 3, float64, channels last):
  conv 3x3 3->16, ReLU, max-pool 2   -> 63 x 63 x 16
  conv 3x3 16->32, ReLU, max-pool 2  -> 30 x 30 x 32
  conv 3x3 32->64, ReLU, max-pool 2  -> 14 x 14 x 64
  dense 12544->128, ReLU; dense 128->10; softmax over CLASSES
(~1.7 M parameters, 13.6 MB; convolutions as im2col + matrix multiply.)

float64, not float32, because of two things seen in TCG guests (QEMU 7.2,
-cpu max): float32 matrix products with the image's BLAS (Debian's reference
libblas3) run ~10x slower than float64 ones, and numpy's AVX2 float32
maximum/minimum/clip against a scalar (ReLU!) segfaults the process (QEMU's
emulation of vpgatherdd), which kills the agent and the VM.

Input (Redis): an image file PIL can decode (JPEG, PNG, ...); it is converted
to RGB and resized to 128 x 128.
Event:
  {"key": "thaw:recognition", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the image from Redis;
  {"size": 224, "seed": 1}
      no "key": classify a deterministic size x size JPEG generated inline.
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32", "image":
[width, height], "top": [[class, probability], ...] (3 best, rounded to 1e-6),
"input_ms", "compute_ms"}.
"""
import io
import time

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from PIL import Image

import thaw_redis
from inputs import DEFAULTS, make_input

SIDE = 128
SEED = 20220405  # weights come from this seed, nothing else
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DTYPE = np.float64
MEAN = np.array([0.485, 0.456, 0.406], dtype=DTYPE)
STD = np.array([0.229, 0.224, 0.225], dtype=DTYPE)


def _he(rng, fan_in, shape):
    return rng.standard_normal(shape, dtype=DTYPE) * np.sqrt(2.0 / fan_in)


def _make_weights(seed):
    rng = np.random.default_rng(seed)
    convs = []
    for cin, cout in ((3, 16), (16, 32), (32, 64)):
        convs.append((_he(rng, 9 * cin, (3, 3, cin, cout)).reshape(9 * cin, cout),
                      np.zeros(cout, dtype=DTYPE)))
    side = SIDE
    for _ in convs:
        side = (side - 2) // 2
    flat = side * side * 64
    dense = [(_he(rng, flat, (flat, 128)), np.zeros(128, dtype=DTYPE)),
             (_he(rng, 128, (128, len(CLASSES))), np.zeros(len(CLASSES), dtype=DTYPE))]
    return convs, dense


CONVS, DENSE = _make_weights(SEED)


def conv3x3_relu_pool(x, w, b):
    """x: H x W x Cin; w: (3*3*Cin) x Cout in (ky, kx, cin) order -> pooled H' x W' x Cout."""
    h, wd, cin = x.shape
    # windows: (H-2) x (W-2) x Cin x 3 x 3 -> rows of (ky, kx, cin)
    cols = sliding_window_view(x, (3, 3), axis=(0, 1)).transpose(0, 1, 3, 4, 2).reshape(-1, 9 * cin)
    y = np.maximum(cols @ w + b, 0).reshape(h - 2, wd - 2, -1)
    ph, pw = (h - 2) // 2, (wd - 2) // 2
    return y[:2 * ph, :2 * pw].reshape(ph, 2, pw, 2, -1).max(axis=(1, 3))


def classify(image_bytes):
    img = Image.open(io.BytesIO(image_bytes))
    size = img.size
    img = img.convert("RGB").resize((SIDE, SIDE), Image.BILINEAR)
    x = (np.asarray(img, dtype=DTYPE) / 255 - MEAN) / STD
    for w, b in CONVS:
        x = conv3x3_relu_pool(x, w, b)
    x = x.reshape(-1)
    (w1, b1), (w2, b2) = DENSE
    logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    p = np.exp(logits - logits.max())
    p /= p.sum()
    best = np.argsort(-p)[:3]
    return size, [[CLASSES[i], round(float(p[i]), 6)] for i in best]


classify(make_input(32, 0))  # warm-up before the snapshot: numpy/PIL code paths, BLAS threads


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    size, top = classify(data)
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             image=list(size), top=top)
