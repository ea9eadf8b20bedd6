"""Long runs show a bar on a terminal and stay quiet in pipes and CI (issue 14 item 7)."""
import io

from syncopy import progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_steps_yield_every_item_and_print_nothing_off_a_terminal(capsys):
    assert list(progress.steps(range(5), "cases")) == [0, 1, 2, 3, 4]  # pytest's stderr is no terminal
    assert capsys.readouterr() == ("", "")


def test_a_terminal_gets_a_bar_but_ci_does_not(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert progress.wanted(_Tty())
    monkeypatch.setenv("CI", "true")
    assert not progress.wanted(_Tty())
    assert not progress.wanted(io.StringIO())


def test_steps_on_draw_to_stderr_and_leave_stdout_clean(capsys):
    assert list(progress.steps(["a", "b"], "cases", on=True)) == ["a", "b"]
    out, err = capsys.readouterr()
    assert out == ""
