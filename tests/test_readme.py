"""The README's Python blocks run as written: each in a fresh interpreter, from a working
directory that has the repository's configs/ and an empty data root (so the synthetic
graphs are generated as on a fresh machine)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(code, tmp_path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    env = {**os.environ, "GNNSYS_DATA": str(tmp_path / "data"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"README block failed:\n{code}\n{result.stderr[-3000:]}"
