"""The one reader of files a user names (grounding/files.py) on a real file system: FIFOs, devices,
symlinks out of a folder, huge sparse files and names that are not UTF-8 are refused quickly, in one line."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from machine import scaled

from thoughtloom.grounding.files import FileRefused, read_regular, read_utf8, shown, walk_files

#: A hang guard: every refusal here is immediate, a blocked open would wait forever.
QUICK = pytest.mark.timeout(scaled(20))


@QUICK
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(FileRefused, match=r"^the tests file .*pipe is a pipe \(FIFO\), not a regular file"):
        read_regular(tmp_path / "pipe", what="the tests file")


@QUICK
def test_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileRefused, match="/dev/zero is a device, not a regular file"):
        read_regular("/dev/zero")


@QUICK
def test_a_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    os.symlink("/dev/zero", tmp_path / "zero.txt")
    with pytest.raises(FileRefused, match="zero.txt is a device"):
        read_regular(tmp_path / "zero.txt")


@QUICK
def test_a_file_larger_than_the_cap_is_refused_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as fh:
        fh.truncate(300 * 1024 * 1024)  # sparse: no 300 MB written
    with pytest.raises(FileRefused, match="big.txt is larger than 32 MB; is it the right file"):
        read_regular(big)


def test_a_gzip_bomb_is_cut_at_the_cap(tmp_path: Path) -> None:
    bomb = tmp_path / "data.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"x" * (2 << 20)))
    with pytest.raises(FileRefused, match="is larger than 1 MB"):
        read_regular(bomb, max_bytes=1 << 20, gzipped=True)


def test_a_symlink_out_of_the_folder_is_refused_inside_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("secret\n")
    os.symlink(tmp_path / "secret.txt", root / "leak.txt")
    with pytest.raises(FileRefused, match=r"^refused: leak.txt resolves to .*secret.txt, outside the allowed folders"):
        read_regular("leak.txt", inside=[root.resolve()])


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("café\n", encoding="utf-8")
    assert read_utf8(tmp_path / "a.txt") == "café\n"


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileRefused, match="^no such file or folder: the config .*nope.json$"):
        read_regular(tmp_path / "nope.json", what="the config")


def test_a_name_that_is_not_utf8_is_shown_escaped() -> None:
    assert shown(b"/tmp/\xff.txt") == "/tmp/\\xff.txt"
    assert shown(os.fsdecode(b"/tmp/\xff.txt")) == "/tmp/\\xff.txt"


def test_the_walk_refuses_names_that_are_not_utf8_and_skips_hidden_ones(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("good")
    (tmp_path / ".hidden.md").write_text("hidden")
    (tmp_path / "b.py").write_text("other")
    with open(os.fsencode(tmp_path) + b"/\xff.md", "wb") as fh:
        fh.write(b"bad name")
    os.mkdir(os.fsencode(tmp_path) + b"/\xfe")
    found = {e.rel: e.refused for e in walk_files(tmp_path, (".md",))}
    assert found == {"good.md": None, "\\xff.md": "its name is not UTF-8; rename it",
                     "\\xfe/": "its name is not UTF-8; rename it"}


def test_a_head_read_takes_the_first_bytes_of_a_larger_file(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_bytes(b"a" * 100 + b"b" * 100)
    assert read_regular(tmp_path / "long.py", max_bytes=100, head=True) == b"a" * 100


@QUICK
def test_a_users_data_set_that_is_a_fifo_is_a_one_line_data_error(tmp_path: Path) -> None:
    from thoughtloom.eval.datasets import DataError, load_dataset

    os.mkfifo(tmp_path / "problems.jsonl")
    with pytest.raises(DataError, match=r"problems.jsonl is a pipe \(FIFO\), not a regular file"):
        load_dataset(f"math:{tmp_path / 'problems.jsonl'}")


@QUICK
def test_a_manifest_named_by_the_user_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    from thoughtloom.store.manifest import Manifest, ManifestError

    os.mkfifo(tmp_path / "run.json")
    with pytest.raises(ManifestError, match=r"cannot read manifest .*run.json: a pipe \(FIFO\), not a regular file"):
        Manifest.load_json(tmp_path / "run.json")
