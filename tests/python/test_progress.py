"""Progress bars: drawn by tqdm on a terminal only, fed by the engine's progress calls."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

import tacc
from tacc._progress import simulation_bar, task_bar

SCENARIO = """\
name = "progress"
duration = "10s"
[topology]
kind = "star"
senders = 2
receivers = 1
link_rate = "1Gbps"
link_delay = "25us"
[[flows]]
name = "bulk"
count = 2
src = "s{i}"
dst = "r0"
transport = "tcp"
"""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "progress.toml"
    path.write_text(SCENARIO)
    return path


def test_no_bar_off_a_terminal() -> None:
    stream = io.StringIO()
    with task_bar(10, stream=stream) as step:
        step(3)

    assert simulation_bar(stream) is None
    assert stream.getvalue() == ""


def test_simulation_bar_shows_simulated_time_rate_and_eta() -> None:
    stream = Terminal()
    bar = simulation_bar(stream)
    assert bar is not None

    bar(500_000_000, 2_000_000_000)
    time.sleep(0.2)  # tqdm redraws at most every 0.1 s
    bar(1_000_000_000, 2_000_000_000)
    bar.close()

    text = stream.getvalue()
    assert "simulating" in text and " 50%" in text
    assert "1.000/2.000 s" in text
    assert "<" in text and "sim s" in text  # elapsed<remaining, rate


def test_task_bar_counts_tasks_done_before_and_during() -> None:
    stream = Terminal()
    with task_bar(4, done=1, desc="reproduce", stream=stream) as step:
        step(2)

    final = stream.getvalue().split("\r")[-1]
    assert "reproduce" in final and "3/4" in final
    assert " run/s" in final or "s/ run" in final


def test_engine_reports_progress_up_to_the_end(engine: None, scenario: Path,
                                               tmp_path: Path) -> None:
    import tacc._core as core

    calls: list[tuple[int, int]] = []
    core.run(str(scenario), out=str(tmp_path / "out"), progress=lambda *a: calls.append(a))

    assert len(calls) >= 2  # 10 s of two bulk flows are millions of events
    assert calls[-1] == (10_000_000_000, 10_000_000_000)
    assert [now for now, _ in calls] == sorted(now for now, _ in calls)


def test_an_exception_in_the_callback_is_raised_after_the_run(
    engine: None, scenario: Path, tmp_path: Path
) -> None:
    import tacc._core as core

    calls = []

    def fail(now: int, end: int) -> None:
        calls.append(now)
        raise RuntimeError("stop drawing")

    with pytest.raises(RuntimeError, match="stop drawing"):
        core.run(str(scenario), out=str(tmp_path / "out"), progress=fail)
    assert len(calls) == 1  # no further calls once one failed
    assert (tmp_path / "out" / "summary.json").is_file()


def test_run_with_progress_draws_on_a_terminal_only(
    engine: None, scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    tacc.run(scenario, out=tmp_path / "piped", progress=True)
    assert piped.getvalue() == ""

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    tacc.run(scenario, out=tmp_path / "tty", progress=True)

    assert "simulating" in terminal.getvalue()
