#!/usr/bin/env python3
"""A checkpoint journal for a generated eVi home (bench/sync.sh, bench/verify.sh).

    bench/add_journal.py CHECKPOINTS_DIR TRANSCRIPT_BYTES [COUNT]

One blob per line, log-normal sizes (median 36 KB, 1 KB to 5 MiB), half
source-like text, half random bytes, seeded; COUNT blobs, or 400 per 348 MB
of transcripts (at least 20).
"""
import datetime, hashlib, json, math, os, random, sys
root, transcript_bytes = sys.argv[1], int(sys.argv[2])
count = int(sys.argv[3]) if len(sys.argv) > 3 else max(20, round(400 * transcript_bytes / 348e6))
os.makedirs(os.path.join(root, "blobs"), exist_ok=True)
rng = random.Random(42)
words = ("let mut fn impl struct pub use match Some None Ok Err self return "
         "async await loop for while if else where trait enum const").split()
t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=6)
lines = []
for seq in range(1, count + 1):
    size = min(max(int(36_000 * math.exp(1.6 * rng.gauss(0, 1))), 1000), 5 << 20)
    if seq % 2:
        text, n = [], 0
        while n < size:
            w = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
            line = "    " * rng.randint(0, 3) + w + f" // {rng.randrange(1 << 32):08x}\n"
            text.append(line)
            n += len(line)
        data = "".join(text).encode()[:size]
    else:
        data = rng.randbytes(size)
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "blobs", sha), "wb") as f:
        f.write(data)
    t += datetime.timedelta(seconds=rng.randint(30, 2400))
    lines.append(json.dumps({
        "seq": seq,
        "ts": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
        "path": f"/home/dev/proj/src/mod{seq % 37}/file{seq}.rs",
        "op": "write", "blob": sha, "size": size,
    }, separators=(",", ":")))
with open(os.path.join(root, "journal.jsonl"), "w") as f:
    f.write("\n".join(lines) + "\n")
