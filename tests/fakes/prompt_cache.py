"""A simulated provider prompt cache, shared by the fakes (stdlib only).

Tokens are estimated as a quarter of a block's JSON bytes (rounded up), the
same way for every door, so a benchmark compares doors on equal prompts.

Two kinds, as the vendors document them:

- `Explicit` (Anthropic Messages, on the API and on Vertex; Bedrock
  Converse): the request marks breakpoints; the prefix up to each one is
  written to the cache (if at least `min_tokens` long) with its lifetime
  ("5m" or "1h"); a later request reads the longest cached prefix that ends
  at one of its breakpoints or at a block up to 20 blocks before one (the
  lookback Anthropic documents). Reads refresh an entry's lifetime. What is
  neither read nor written is plain input.
- `Implicit` (OpenAI, Azure OpenAI, Gemini): no markers; a request reads
  the longest prefix, in whole blocks, that an earlier request of the same
  model and key sent, counted in steps of `step` tokens once at least
  `min_tokens` (OpenAI: 1024, then 128 at a time).

Each cache is per model and key (`scope`): another model, another door
or another `prompt_cache_key` starts cold. Every fake appends the usage it
answered through its cache to `FILE.usage` (`record_usage`), FILE being its
`--log`.
"""
import hashlib
import json
import threading
import time

LIFETIMES = {"5m": 300.0, "1h": 3600.0}
USAGE_LOCK = threading.Lock()


def record_usage(log, usage):
    """Appends the usage a fake answered to `LOG.usage` (one JSON line per
    answer), so a test can see what the cache did without the client."""
    with USAGE_LOCK, open(f"{log}.usage", "a") as f:
        f.write(json.dumps(usage) + "\n")
    return usage
LOOKBACK = 20


def tokens(block):
    """A block's estimated tokens: a quarter of its JSON bytes."""
    data = block if isinstance(block, (bytes, str)) else json.dumps(block, sort_keys=True)
    size = len(data.encode() if isinstance(data, str) else data)
    return max(1, -(-size // 4))


def prefix_hashes(blocks):
    """The running hash of each prefix: hashes[i] covers blocks[:i + 1]."""
    running = hashlib.sha256()
    out = []
    for block in blocks:
        running.update(json.dumps(block, sort_keys=True).encode())
        running.update(b"\x00")
        out.append(running.copy().hexdigest())
    return out


class Explicit:
    """A breakpoint cache (Anthropic, Bedrock)."""

    def __init__(self, min_tokens=1024, clock=time.monotonic):
        self.min_tokens = min_tokens
        self.clock = clock
        self.entries = {}
        self.lock = threading.Lock()

    def use(self, scope, blocks, breakpoints):
        """`blocks` in prompt order, `breakpoints` a list of (index of the
        last block it covers, ttl "5m" or "1h"). Returns the usage as
        (uncached input, read, written, written with a 1h lifetime)."""
        sizes = [tokens(b) for b in blocks]
        total = sum(sizes)
        hashes = prefix_hashes(blocks)
        ends = [sum(sizes[: i + 1]) for i in range(len(blocks))]
        now = self.clock()
        with self.lock:
            for key, (_, expires) in list(self.entries.items()):
                if expires <= now:
                    del self.entries[key]
            read_at = -1
            for index, _ in breakpoints:
                for back in range(index, max(-1, index - LOOKBACK - 1), -1):
                    if (scope, hashes[back]) in self.entries and back > read_at:
                        read_at = back
                        break
            if read_at >= 0:
                key = (scope, hashes[read_at])
                ttl = self.entries[key][0]
                self.entries[key] = (ttl, now + LIFETIMES[ttl])
            read = ends[read_at] if read_at >= 0 else 0
            written = written_1h = 0
            covered = read
            for index, ttl in sorted(breakpoints):
                if index <= read_at or ends[index] < self.min_tokens:
                    continue
                self.entries[(scope, hashes[index])] = (ttl, now + LIFETIMES[ttl])
                part = ends[index] - covered
                covered = ends[index]
                written += part
                if ttl == "1h":
                    written_1h += part
            return total - read - written, read, written, written_1h


class Implicit:
    """An automatic prefix cache (OpenAI, Azure OpenAI, Gemini)."""

    def __init__(self, min_tokens=1024, step=128, lifetime=600.0, clock=time.monotonic):
        self.min_tokens = min_tokens
        self.step = step
        self.lifetime = lifetime
        self.clock = clock
        self.entries = {}
        self.lock = threading.Lock()

    def use(self, scope, blocks):
        """Returns (total input tokens, cached tokens) and keeps this prompt."""
        sizes = [tokens(b) for b in blocks]
        total = sum(sizes)
        hashes = prefix_hashes(blocks)
        now = self.clock()
        cached = 0
        with self.lock:
            running = 0
            for i, h in enumerate(hashes):
                running += sizes[i]
                key = (scope, h)
                if key in self.entries and self.entries[key] > now:
                    cached = running
            for h in hashes:
                self.entries[(scope, h)] = now + self.lifetime
        if cached < self.min_tokens:
            return total, 0
        return total, cached - cached % self.step
