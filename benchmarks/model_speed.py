"""Speed of each installed embedded model: load, prompt reading, generation, batched samples.

Usage: .venv/bin/python benchmarks/model_speed.py [NAME ...]   (default: every installed model)
For each model: seconds to load; prompt tokens read per second (a ~500-token prompt, nothing
cached); generated tokens per second for one sample (greedy, 128 tokens) and for 5 samples decoded
together (temperature 0.7, 64 tokens each). Each figure is the median of 3 runs. Prints a table
and the load average before and after; writes nothing. Uses every core (llama.cpp's default).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

from thoughtloom.llm.local import LocalLlamaBackend
from thoughtloom.llm.models import EMBEDDED_MODELS, EmbeddedModel, parts_installed
from thoughtloom.llm.types import GenerateRequest, Message, Prompt

RUNS = 3
# Varied text, so that nothing is a repeat the cache could serve: ~500 tokens.
LONG = " ".join(f"Item {i}: the {w} costs {i * 7 % 31} dollars." for i, w in
                enumerate(["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "nut"] * 6))


def prompt(tag: int) -> Prompt:
    text = f"Run {tag}. {LONG}\nQuestion: which item costs the most?\nAnswer:"
    return Prompt(text=text, messages=(Message("user", text),))


async def measure(model: EmbeddedModel) -> dict[str, float]:
    t0 = time.perf_counter()
    backend = LocalLlamaBackend(embedded=model)
    backend.load()
    load_s = time.perf_counter() - t0
    read, one, five = [], [], []
    for run in range(RUNS):
        p = prompt(run)
        n_prompt = backend.count_tokens(p)
        t0 = time.perf_counter()
        await backend.generate(GenerateRequest(p, max_tokens=1, temperature=0.0))
        read.append(n_prompt / (time.perf_counter() - t0))
        # The prompt is now cached: what follows is generation.
        t0 = time.perf_counter()
        c = await backend.generate(GenerateRequest(p, max_tokens=128, temperature=0.0))
        one.append(c.usage.output_tokens / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        c = await backend.generate(GenerateRequest(p, n=5, max_tokens=64, temperature=0.7, seed=run))
        five.append(c.usage.output_tokens / (time.perf_counter() - t0))
    return {"load_s": load_s, "prompt_tok_s": statistics.median(read), "gen_tok_s": statistics.median(one),
            "gen5_tok_s": statistics.median(five), "n_prompt": n_prompt}


def main() -> None:
    names = sys.argv[1:] or [m.name for m in EMBEDDED_MODELS.values() if parts_installed(m)]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    print("| model | load s | prompt tokens/s (~500-token prompt) | generated tokens/s, 1 sample | "
          "generated tokens/s, 5 samples together |")
    print("|---|---|---|---|---|")
    for name in names:
        r = asyncio.run(measure(EMBEDDED_MODELS[name]))
        print(f"| {name} | {r['load_s']:.1f} | {r['prompt_tok_s']:.0f} ({r['n_prompt']:.0f} tokens) | "
              f"{r['gen_tok_s']:.1f} | {r['gen5_tok_s']:.1f} |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
