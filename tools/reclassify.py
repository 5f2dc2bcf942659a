"""The survivors of a mutation report (its README.md diffs, its results.json counts), sorted by
tools.mutate.class_of with today's reasons.json, and both scores per module.

Run from the checkout's root: ``python3 -m tools.reclassify [REPORT_DIR]`` (default
``evidence/DGR-032/mutation/machines``).  The diffs come from the report's README, the one
place a run keeps them."""
import collections
import json
import re
import sys
from pathlib import Path

from tools.mutate import class_of, classes_by_module, contract_score, load_reasons, reason_for, score

dest = Path(sys.argv[1] if len(sys.argv) > 1 else "evidence/DGR-032/mutation/machines")
# A mutant's section: "### `name` (status...)" then its reason and its diff.
blocks = [b for b in (dest / "README.md").read_text(encoding="utf-8").split("\n### ")[1:] if b.startswith("`")]
reasons = load_reasons(dest / "reasons.json")
results = json.loads((dest / "results.json").read_text(encoding="utf-8"))
diffs = {block.split("`")[1]: re.search(r"```diff\n(.*?)```", block, re.S).group(1) for block in blocks}
kinds = {name: class_of(name, diff, reasons) for name, diff in diffs.items()}
unexplained = sum(kinds[name] == "gap" and not reason_for(name, diff, reasons) for name, diff in diffs.items())
classes = collections.defaultdict(collections.Counter, classes_by_module(kinds))
print("| module | mutants | equivalent | contract-free | gap | score | score of what the contract sees |")
print("|---|---|---|---|---|---|---|")
total, total_classes = collections.Counter(), collections.Counter()
for module, counts in sorted(results["modules"].items()):
    counts = collections.Counter(counts)
    total += counts
    total_classes += classes[module]
    k = classes[module]
    print(f"| `{module}` | {sum(counts.values())} | {k['equivalent']} | {k['contract-free']} | {k['gap']} | "
          f"{score(counts):.1f}% | {contract_score(counts, k):.1f}% |")
k = total_classes
print(f"| **all** | {sum(total.values())} | {k['equivalent']} | {k['contract-free']} | {k['gap']} | "
      f"{score(total):.1f}% | {contract_score(total, k):.1f}% |")
print(f"gaps with no reason in reasons.json: {unexplained}")
