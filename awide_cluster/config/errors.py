"""The error of a bad config file, apart from the parser (``common.py``: pydantic, PyYAML) so
that a program can name it (catch it, say it) without importing either: the CLI's lookup of
a cluster fails fast on a usage error. ``config.common`` exports both names too."""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(Exception):
    """An invalid config file. ``field`` is a dotted path (``etcd.endpoints.1``) or ``-``.
    ``str()`` is the first problem; ``problems`` every ``(field, reason)`` found in one
    reading (the first included), ``lines()`` them as ``FILE: field: reason``."""

    def __init__(self, file: str, field: str, reason: str,
                 more: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(f"{file}: {field}: {reason}")
        self.file, self.field, self.reason = file, field, reason
        self.problems: tuple[tuple[str, str], ...] = ((field, reason), *more)

    def lines(self) -> list[str]:
        return [f"{self.file}: {field}: {reason}" for field, reason in self.problems]

    @classmethod
    def of(cls, file: str, problems: Sequence[tuple[str, str]]) -> ConfigError:
        """One error for several problems (at least one)."""
        (field, reason), *more = problems
        return cls(file, field, reason, more)


class WrongKind(ConfigError):
    """A config file of the other kind: a gateway's where a daemon's is expected, or the
    reverse. One line: ``FILE: this is a gateway config, not a daemon config: ...``."""

    def __init__(self, file: str, found: str, wanted: str, hint: str) -> None:
        ConfigError.__init__(self, file, "-", f"this is a {found} config, not a {wanted} "
                                              f"config: {hint}")
        Exception.__init__(self, f"{file}: {self.reason}")
        self.found, self.wanted = found, wanted

    def lines(self) -> list[str]:
        return [str(self)]
