"""What a screen asks the app to open: the app owns the stack of screens (`RtaxApp`
handles these messages), a screen only posts one, or `dismiss()`es itself."""

from __future__ import annotations

from textual.message import Message


class OpenRun(Message):
    """A run's screen on the engine started with `engine_argv`, recording to
    `record_path`; compared with `compare_with` (a recording) once it ends."""

    def __init__(
        self, engine_argv: list[str], record_path: str, title: str, compare_with: str | None
    ) -> None:
        super().__init__()
        self.engine_argv = engine_argv
        self.record_path = record_path
        self.title = title
        self.compare_with = compare_with


class OpenReplay(Message):
    """A recording played back."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path


class OpenCompare(Message):
    """Two recordings side by side."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__()
        self.a = a
        self.b = b
