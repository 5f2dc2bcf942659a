"""Print the README's N-th ``sh`` block (1-based): CI runs the README's commands as written."""

import re
import sys
from pathlib import Path

blocks = re.findall(r"```sh\n(.*?)```", (Path(__file__).resolve().parent.parent / "README.md").read_text("utf-8"),
                    flags=re.S)
print(blocks[int(sys.argv[1]) - 1], end="")
