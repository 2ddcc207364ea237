"""Reading data files: formats, order, and errors that name the config key and the file."""

import json

import pandas as pd
import pytest

from verl_lite.data.files import DataFileError, read_column, read_rows


def row(prompt, source="synthetic_arith"):
    return {"data_source": source, "prompt": prompt, "reward_model": {"ground_truth": "3"}}


def chat(text):
    return [{"role": "user", "content": text}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_reads_parquet_and_jsonl_lists_in_order(tmp_path):
    pd.DataFrame([row(chat("a")), row(chat("b"))]).to_parquet(tmp_path / "one.parquet")
    write_jsonl(tmp_path / "two.jsonl", [row("c")])
    (tmp_path / "three.json").write_text(json.dumps([row("d")]))
    rows = read_rows([tmp_path / "one.parquet", str(tmp_path / "two.jsonl"), tmp_path / "three.json"])
    # parquet list columns come back as python lists of dicts, not numpy arrays
    assert [r["prompt"] for r in rows] == [chat("a"), chat("b"), "c", "d"]


def test_reads_a_saved_hf_dataset_folder(tmp_path):
    import datasets

    datasets.Dataset.from_list([row(chat("a"))]).save_to_disk(str(tmp_path / "ds"))
    assert read_rows(tmp_path / "ds")[0]["reward_model"] == {"ground_truth": "3"}


def test_missing_and_unsupported_files_are_named(tmp_path):
    with pytest.raises(
        DataFileError, match=r"^data\.train_files: data file '.*absent\.parquet' does not exist"
    ):
        read_rows([tmp_path / "absent.parquet"])
    (tmp_path / "data.csv").write_text("x\n")
    with pytest.raises(
        DataFileError, match=r"^data\.val_files: '.*data\.csv': unsupported data file type '\.csv'"
    ):
        read_rows(tmp_path / "data.csv", key="data.val_files")


def test_corrupt_parquet_error_names_the_key_and_the_broken_file(tmp_path):
    pd.DataFrame([row("a")]).to_parquet(tmp_path / "good.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"not a parquet file at all")
    with pytest.raises(DataFileError) as info:
        read_rows([tmp_path / "good.parquet", tmp_path / "bad.parquet"], key="data.val_files")
    message = str(info.value)
    assert message.startswith(
        f"data.val_files: cannot read {str(tmp_path / 'bad.parquet')!r} (ArrowInvalid: "
    )
    assert "good.parquet" not in message


def test_corrupt_jsonl_error_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row("a")) + "\n" + '{"prompt": "b", \n')
    with pytest.raises(
        DataFileError, match=r"^data\.train_files: cannot read '.*train\.jsonl': line 2 is not JSON"
    ):
        read_rows(path)


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.json", "empty.parquet"])
def test_empty_file_is_an_error_naming_it(tmp_path, name):
    path = tmp_path / name
    if name == "empty.json":
        path.write_text("[]")
    elif name == "empty.parquet":
        pd.DataFrame({"prompt": pd.Series([], dtype=str)}).to_parquet(path)
    else:
        path.write_text("\n")
    with pytest.raises(DataFileError, match=rf"^data\.train_files: data file '.*{name}' holds no rows\."):
        read_rows(path)


def test_zero_byte_parquet_cannot_be_read_and_is_named(tmp_path):
    (tmp_path / "zero.parquet").write_bytes(b"")
    with pytest.raises(DataFileError, match=r"^data\.train_files: cannot read '.*zero\.parquet'"):
        read_column(tmp_path / "zero.parquet", "data_source", "data.train_files")


def test_read_column_gives_values_or_none_when_absent(tmp_path):
    pd.DataFrame([row("a", "x"), row("b", "y")]).to_parquet(tmp_path / "d.parquet")
    write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": "b", "data_source": "z"}])
    assert read_column(tmp_path / "d.parquet", "data_source", "data.train_files") == ["x", "y"]
    assert read_column(tmp_path / "d.parquet", "missing", "data.train_files") is None
    # a jsonl row without the key reads as None (the caller substitutes its default)
    assert read_column(tmp_path / "d.jsonl", "data_source", "data.train_files") == [None, "z"]


def test_sft_data_build_names_a_corrupt_val_file(tmp_path, tokenizer):
    from verl_lite.main_sft import build_sft_data, load_config
    from verl_lite.trainer.load import compose_config

    bad = tmp_path / "val.parquet"
    bad.write_bytes(b"\x00" * 64)
    config = load_config(compose_config("sft_trainer", [f"data.val_files={bad}"]))
    # main_sft builds its data on the controller before Ray starts
    with pytest.raises(DataFileError, match=rf"^data\.val_files: cannot read '{bad}' \(ArrowInvalid: "):
        build_sft_data(config, tokenizer)
