"""Private local Ray clusters keep their sessions in a folder of gnnsys's own, and a new
run deletes what runs that no longer live left there (Ray keeps every session in /tmp/ray
for ever; a killed run's piled up), except the newest, whose logs explain the last run,
and ends the Ray agents a killed driver left running."""
import os
import subprocess
import sys
import time

import pytest

from gnnsys.distributed import launcher
from gnnsys.errors import ConfigError


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_sessions_of_dead_drivers_go_but_the_newest(tmp_path):
    names = [f"session_2026-11-2{i}_10-00-00_000000_{dead_pid()}" for i in range(3)]
    for age, name in enumerate(names):
        (tmp_path / name / "logs").mkdir(parents=True)
        os.utime(tmp_path / name, (time.time() - 100 + age, time.time() - 100 + age))
    live = tmp_path / f"session_2026-11-20_10-00-00_000000_{os.getpid()}"
    live.mkdir()
    (tmp_path / "session_latest").symlink_to(tmp_path / names[0])
    (tmp_path / "session_notes_x").mkdir()                  # not a pid: not ours to judge
    launcher.remove_dead_sessions(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names[2], live.name, "session_latest", "session_notes_x"])


def test_the_sessions_folder_is_the_users_own(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setattr(launcher.tempfile, "gettempdir", lambda: str(tmp_path))
    path = launcher.private_sessions_dir()
    own = path.parent
    assert own.parent == tmp_path and path.is_dir() and not own.is_symlink()
    assert own.stat().st_mode & 0o777 == 0o700    # what Ray opens to everyone is inside
    assert launcher.private_sessions_dir() == path            # reused
    path.rmdir()
    own.rmdir()
    own.symlink_to(tmp_path)                      # planted: not a folder of this user's
    with pytest.raises(ConfigError, match="is not a folder of this user"):
        launcher.private_sessions_dir()


def test_ray_tmpdir_is_where_the_sessions_folder_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    (tmp_path / "ray").mkdir()
    assert launcher.private_sessions_dir().parent.parent == tmp_path / "ray"


def _holding(path, name):
    """A process named `name` (its argv[0], as Ray names its agents) holding `path` open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([name, "-c", f"f = open({str(path)!r}, 'a'); print(flush=True); "
                              "import time; time.sleep(60)"],
                             executable=sys.executable, stdout=subprocess.PIPE)
    child.stdout.readline()            # the file is open
    return child


def test_ray_agents_of_a_killed_driver_are_ended(tmp_path):
    dead = tmp_path / f"session_2026-11-20_10-00-00_000000_{dead_pid()}"
    live = tmp_path / f"session_2026-11-21_10-00-00_000000_{os.getpid()}"
    orphan = _holding(dead / "logs" / "dashboard_agent.err", "ray::DashboardAgent")
    kept = [_holding(live / "logs" / "dashboard_agent.err", "ray::DashboardAgent"),
            _holding(dead / "logs" / "raylet.out", "less")]     # a user reading its log
    try:
        assert launcher.end_orphans(tmp_path, "/nonexistent/ray") == [orphan.pid]
        assert orphan.wait(timeout=10) == -9
        assert all(child.poll() is None for child in kept)
    finally:
        for child in [orphan, *kept]:
            child.kill()
            child.wait()
