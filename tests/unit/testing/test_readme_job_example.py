"""The README's "Writing a job" example runs as written: the job's two python blocks, executed in
one namespace (the second tests the first with the harness and asserts what it printed)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_job_example_holds() -> None:
    text = README.read_text(encoding="utf-8")
    after = text[text.index("<!-- readme-job-example -->"):]
    blocks = re.findall(r"```python\n(.*?)```", after, flags=re.S)[:2]
    assert len(blocks) == 2 and "class AuditedHits" in blocks[0] and "KeyedProcessFunctionHarness" in blocks[1]
    namespace: dict = {}
    exec(compile(blocks[0], "README.md (the job)", "exec"), namespace)  # noqa: S102 - the README's own code
    exec(compile(blocks[1], "README.md (its test)", "exec"), namespace)  # noqa: S102
    assert namespace["CONFIRMED"] == [(1, 3)]
