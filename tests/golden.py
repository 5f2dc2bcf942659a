"""Golden vectors: a few prompts -> tokens and hidden checksums, pinned in a JSON file.

``python -m tests.golden`` prints the vectors this checkout computes;
``python -m tests.golden --write`` rewrites ``tests/golden_vectors.json``
(do that only for an intended change of outputs, and say so in the commit).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fakeshard import FakeShardEngine, Pipeline, ShardSpec, TokenBundle

PATH = Path(__file__).with_name("golden_vectors.json")
CASES = [
    {"model_id": "golden-a", "n_layers": 4, "hidden_size": 8, "vocab_size": 256, "seed": 0,
     "prompt": [1, 2, 3, 4], "new_tokens": 6},
    {"model_id": "golden-b", "n_layers": 12, "hidden_size": 16, "vocab_size": 32000, "seed": 12345,
     "prompt": [31999, 0, 17, 17, 17], "new_tokens": 4},
    {"model_id": "模型-ü", "n_layers": 2, "hidden_size": 4, "vocab_size": 7, "seed": -3,
     "prompt": [6], "new_tokens": 8},
]


def compute() -> list[dict]:
    out = []
    for case in CASES:
        spec = ShardSpec(case["model_id"], case["n_layers"], 0, case["n_layers"],
                         case["hidden_size"], case["vocab_size"])
        full = Pipeline([FakeShardEngine(spec, seed=case["seed"])])
        tokens = full.generate("golden", case["prompt"], case["new_tokens"])
        head = FakeShardEngine(spec.with_layers(0, case["n_layers"] // 2), seed=case["seed"])
        hidden = head.prefill(TokenBundle("golden", 0, 0, tuple(case["prompt"])))
        out.append({**case, "tokens": tokens, "head_checksum": hidden.checksum,
                    "head_first_row": list(hidden.rows()[0])})
    return out


if __name__ == "__main__":
    text = json.dumps(compute(), indent=1, ensure_ascii=False) + "\n"
    if "--write" in sys.argv:
        PATH.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
