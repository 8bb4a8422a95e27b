"""Files the commands write are written whole or not at all: a failure leaves the old file as it was."""
from __future__ import annotations

import os
import stat

import pytest

from studygroup.errors import InputError
from studygroup.views.output_file import write_text, write_whole


def test_a_failed_write_leaves_the_old_file_and_no_debris(tmp_path):
    old = tmp_path / "report.html"
    old.write_text("the old report")

    def fails_halfway(f):
        f.write(b"half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match="No space left on device"):
        write_whole(old, fails_halfway)
    assert old.read_text() == "the old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_a_write_replaces_the_file_keeping_its_permissions(tmp_path):
    old = tmp_path / "fig.svg"
    old.write_text("old")
    os.chmod(old, 0o640)
    write_text(old, "new ✓")
    assert old.read_text(encoding="utf-8") == "new ✓" and stat.S_IMODE(old.stat().st_mode) == 0o640


def test_a_new_file_gets_the_umask_permissions(tmp_path):
    umask = os.umask(0o027)
    try:
        write_text(tmp_path / "new.html", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.html").stat().st_mode) == 0o640


def test_a_link_stays_a_link_and_its_target_is_replaced(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "lesson.html"
    target.write_text("old")
    link = tmp_path / "lesson.html"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["lesson.html"]


def test_a_device_is_written_to_not_replaced():
    write_text("/dev/null", "nothing")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_folder_that_refuses_gives_one_line(tmp_path):
    with pytest.raises(InputError, match="cannot write"):
        write_text(tmp_path / "missing" / "x.html", "x")
