"""bench/refresh_docs.py: fragments replace exactly their marked sections and nothing else."""

import pytest

from bench.refresh_docs import refresh, replace_section, write_fragment

DOC = """# Benchmarks

## Dispatch

Prose that stays.

<!-- bench:dispatch -->
| old | table |
<!-- /bench:dispatch -->

Closing prose.

<!-- bench:rollout -->
| rollout | table |
<!-- /bench:rollout -->
"""


def test_replace_section_swaps_only_the_marked_table():
    out = replace_section(DOC, "dispatch", "| new | table |\n|---|---|\n")
    assert "| old | table |" not in out
    assert "<!-- bench:dispatch -->\n| new | table |\n|---|---|\n<!-- /bench:dispatch -->" in out
    # everything outside the markers is unchanged
    assert out.replace("| new | table |\n|---|---|", "| old | table |") == DOC


def test_replace_section_names_the_missing_markers():
    with pytest.raises(ValueError, match=r"section 'kv_store' needs exactly one '<!-- bench:kv_store -->'"):
        replace_section(DOC, "kv_store", "| x |")


def test_refresh_updates_each_fragment_and_leaves_the_rest(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(DOC)
    fragments = tmp_path / "fragments"
    fragments.mkdir()
    (fragments / "rollout.md").write_text("| rollout | 2 |\n")
    assert refresh(doc, fragments) == ["rollout"]
    text = doc.read_text()
    assert "<!-- bench:rollout -->\n| rollout | 2 |\n<!-- /bench:rollout -->" in text
    assert "| old | table |" in text and "Prose that stays." in text


def test_a_fragment_is_written_where_asked_even_into_a_new_folder(tmp_path):
    # as in a fresh clone, where outputs/bench/ does not exist yet
    path = tmp_path / "outputs" / "bench" / "rollout.md"
    write_fragment(path, ["engine", "s"], [["hf", "1.0"]], note="One run.")
    assert path.read_text() == "One run.\n\n| engine | s |\n|---|---|\n| hf | 1.0 |\n"
