"""Checkpoint folders on disk: atomic publishing, which one ``auto`` picks, pruning, bad resume settings."""

import pytest

from verl_lite.trainer.checkpoint import (
    COMPLETE_MARKER,
    LATEST_FILE,
    CheckpointWriter,
    complete_checkpoints,
    find_latest_checkpoint,
    load_trainer_state,
    prune_checkpoints,
    resolve_resume_path,
)


def _save(root, step):
    writer = CheckpointWriter(str(root), step)
    writer.save_trainer_state({"global_step": step})
    return writer


def test_a_checkpoint_is_invisible_until_published(tmp_path):
    writer = _save(tmp_path, 2)
    assert find_latest_checkpoint(str(tmp_path)) is None  # still global_step_2.partial
    path = writer.publish()
    assert path.endswith("global_step_2") and (tmp_path / "global_step_2" / COMPLETE_MARKER).exists()
    assert find_latest_checkpoint(str(tmp_path)) == path
    assert load_trainer_state(path)["global_step"] == 2
    assert (tmp_path / LATEST_FILE).read_text() == "2"


def test_auto_skips_half_written_folders(tmp_path):
    _save(tmp_path, 2).publish()
    _save(tmp_path, 6)  # crashed before publish: global_step_6.partial
    (tmp_path / "global_step_8").mkdir()  # a folder without the completion marker
    (tmp_path / "notes").mkdir()
    assert find_latest_checkpoint(str(tmp_path)).endswith("global_step_2")
    assert resolve_resume_path("auto", str(tmp_path), None).endswith("global_step_2")
    assert resolve_resume_path("disable", str(tmp_path), None) is None
    assert find_latest_checkpoint(str(tmp_path / "missing")) is None


def test_republishing_a_step_replaces_it_and_pruning_keeps_the_newest(tmp_path):
    for step in (2, 4, 6, 4):
        _save(tmp_path, step).publish()
    assert [s for s, _ in complete_checkpoints(str(tmp_path))] == [2, 4, 6]
    removed = prune_checkpoints(str(tmp_path), 2)
    assert [p.rsplit("_", 1)[-1] for p in removed] == ["2"]
    assert [s for s, _ in complete_checkpoints(str(tmp_path))] == [4, 6]
    assert prune_checkpoints(str(tmp_path), None) == []


def test_bad_resume_settings_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="trainer.resume_mode='sometimes' is not valid"):
        resolve_resume_path("sometimes", str(tmp_path), None)
    (tmp_path / "global_step_3").mkdir()
    with pytest.raises(
        ValueError, match="trainer.resume_from_path=.*global_step_3.*not a complete checkpoint"
    ):
        resolve_resume_path("resume_path", str(tmp_path), str(tmp_path / "global_step_3"))
