"""Extension files: each is imported once per process, and files that share a name are all imported."""

import builtins

from verl_lite.utils.extensions import load_extensions


def test_two_files_with_the_same_name_are_both_imported_and_each_only_once(tmp_path):
    builtins._verl_lite_test_imports = []  # each file records its import here
    try:
        for folder in ("a", "b"):
            (tmp_path / folder).mkdir()
            (tmp_path / folder / "my_ext.py").write_text(
                f"import builtins\nbuiltins._verl_lite_test_imports.append({folder!r})\n"
            )
        paths = [str(tmp_path / folder / "my_ext.py") for folder in ("a", "b")]
        load_extensions(paths)
        load_extensions(paths)
        assert builtins._verl_lite_test_imports == ["a", "b"]
    finally:
        del builtins._verl_lite_test_imports
