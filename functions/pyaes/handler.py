"""pyaes (FaaSnap Table 2): encrypt and decrypt a message with pure-Python AES.

AES-128 in CTR mode with pyaes (Debian's python3-pyaes 1.6.1, pure Python), as
in FunctionBench's pyaes: encrypt the message, decrypt the ciphertext, check
the round trip. The key is fixed (derived from a constant), the counter starts
at 0, so the ciphertext is deterministic.

Input (Redis): the plaintext bytes.
Event:
  {"key": "thaw:pyaes", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the message from Redis;
  {"size": 8192, "seed": 1}
      no "key": encrypt `size` bytes of deterministic printable ASCII
      (inputs.make_input; 8 KiB is the default, sized for TCG).
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32",
"ciphertext_crc32", "roundtrip_ok", "input_ms", "compute_ms"}.
"""
import hashlib
import time
import zlib

import pyaes

import thaw_redis
from inputs import DEFAULTS, make_input

KEY = hashlib.sha256(b"thaw pyaes key").digest()[:16]


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    ciphertext = pyaes.AESModeOfOperationCTR(KEY, pyaes.Counter(0)).encrypt(data)
    plaintext = pyaes.AESModeOfOperationCTR(KEY, pyaes.Counter(0)).decrypt(ciphertext)
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             ciphertext_crc32=zlib.crc32(ciphertext), roundtrip_ok=plaintext == data)
