"""The README's blocks run as written: each in a fresh working directory that has the
repository's configs/ and an empty data root (so the synthetic graphs are generated as on
a fresh machine), a Python block in a fresh interpreter, a bash block in `bash -e` (its
first failing command fails it).

Two things differ from a new user's machine, both outside the blocks' text: the copied
configs are cut short (`CUT_SHORT`: one epoch; temporal runs also skip the one-vs-all
ranking, most of a test pass, take 5x larger batches, 5x fewer steps, and a model of
16-wide memory and embeddings over 5 neighbours), and `pip install ... &&` starting a line is left out (the
suite runs in the environment that command made; running it again would reinstall the
package under test). A comment on the line before a block's fence says more:

    <!-- readme-test: skip: REASON -->        the block cannot run here (root, fixed ports...)
    <!-- readme-test: first docs/DATA.md "SECTION" -->   that section's Python blocks run first
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<marker>[^\n]*?) -->\n)?```(?P<lang>python|bash)\n"
                   r"(?P<code>.*?)```", re.S)
BLOCKS = [(m["lang"], m["code"], m["marker"] or "", README.count("\n", 0, m.start()) + 1)
          for m in BLOCK.finditer(README)]
INSTALL = re.compile(r"^pip install [^\n]*? && ", re.M)
CUT_SHORT = {"train": {"epochs": 1}}
CUT_SHORT_TEMPORAL = {"temporal": {"rank_all": False, "memory_dim": 16, "time_dim": 16,
                                   "embedding_dim": 16, "num_neighbors": 5},
                      "sampler": {"batch_size": 1000}}


def test_readme_has_python_and_bash_blocks():
    langs = [lang for lang, *_ in BLOCKS]
    assert langs.count("python") >= 2 and langs.count("bash") >= 8


def test_markers_are_known_and_justified():
    for _, _, marker, line in BLOCKS:
        assert marker == "" or re.fullmatch(r"skip: .{20,}|first docs/DATA\.md \"[^\"]+\".*",
                                            marker), f"README.md:{line}: {marker}"
    # the block a marker stands above is the block it applies to: none is left dangling
    assert README.count("<!-- readme-test:") == sum(1 for b in BLOCKS if b[2])


def working_dir(tmp_path: Path) -> dict:
    """Copy configs/ (cut short) into tmp_path; the environment a block runs in."""
    for source in (REPO / "configs").glob("*.yaml"):
        config = yaml.safe_load(source.read_text())
        for section, values in (CUT_SHORT | (CUT_SHORT_TEMPORAL if config.get("mode") ==
                                             "temporal" else {})).items():
            config.setdefault(section, {}).update(values)
        (tmp_path / "configs").mkdir(exist_ok=True)
        (tmp_path / "configs" / source.name).write_text(yaml.safe_dump(config))
    return {**os.environ, "GNNSYS_DATA": str(tmp_path / "data"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")]))}


def doc_blocks(marker: str) -> list[str]:
    """The Python blocks of the docs section a `first` marker names."""
    path, heading = re.fullmatch(r'first (\S+) "([^"]+)".*', marker).groups()
    text = (REPO / path).read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end if end > 0 else None], re.S)


@pytest.mark.parametrize("lang, code, marker, line", BLOCKS,
                         ids=[f"{lang}-line{line}" for lang, _, _, line in BLOCKS])
def test_readme_block_runs(lang, code, marker, line, tmp_path):
    if marker.startswith("skip: "):
        pytest.skip(marker[len("skip: "):])
    env = working_dir(tmp_path)
    for first in doc_blocks(marker) if marker.startswith("first ") else []:
        subprocess.run([sys.executable, "-c", first], cwd=tmp_path, env=env, check=True)
    command = ([sys.executable, "-c", code] if lang == "python" else
               ["bash", "-e", "-o", "pipefail", "-c", INSTALL.sub("", code)])
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, \
        f"README.md:{line}: the block failed:\n{code}\n{result.stderr[-3000:]}"


def test_draw_changes_name_commits_of_this_repository():
    """README's table of the commits that changed random draws (results move at the same
    seed between versions) names commits that exist here."""
    section = README[README.index("### The same seed in another version"):]
    rows = [line.split("|")[1] for line in section[:section.index("\n### ")].splitlines()
            if line.startswith("| `")]
    commits = re.findall(r"`([0-9a-f]{7,40})`", "".join(rows))
    assert len(rows) >= 5 and len(commits) >= len(rows)
    git = ["git", "-C", str(REPO)]
    shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)
    if shallow.returncode or shallow.stdout.strip() == "true":
        pytest.skip("not a whole git checkout: the commits cannot be looked up")
    for commit in commits:
        found = subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"])
        assert found.returncode == 0, f"README names commit {commit}, which is not here"
