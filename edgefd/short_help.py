"""A `--help` a newcomer reads: the common flags in full, the rest folded to their names.

`edgefd simulate --help` explained every one of its 60-odd flags, 173 lines of them. As curl's
`--help` does, a command's groups of less common flags (the data, the wire, local training...)
now show as one line of flag names each, and `--help-all` explains every flag. Nothing is taken
away: every flag still parses, and its help is there with `--help-all`.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterable

HELP_ALL = "--help-all"
WIDTH = 100


class FoldingParser(argparse.ArgumentParser):
    """An ArgumentParser whose `--help` folds the groups given to :meth:`fold` to one line of flag
    names each; `--help-all` (:meth:`add_help_all`) shows them in full. The subcommands' parsers
    are of the same class (argparse makes them so)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.folded: dict[str, list[argparse.Action]] = {}
        self.full_help = False

    def add_help_all(self) -> None:
        """`--help-all`, for a parser that folds groups; added before its first flag, it comes
        right after `--help`."""
        self.add_argument(HELP_ALL, action=FullHelp, help="show every option with its help (--help folds some groups)")

    def fold(self, title: str, actions: Iterable[argparse.Action]) -> None:
        """Shows ``actions`` (a group titled ``title``) as their names only in `--help`."""
        shown = [action for action in actions if action.help != argparse.SUPPRESS]
        if shown:
            self.folded.setdefault(title, []).extend(shown)

    def format_help(self) -> str:
        if self.full_help or not self.folded:
            return super().format_help()
        actions = [action for group in self.folded.values() for action in group]
        helps = [action.help for action in actions]
        epilog = self.epilog
        for action in actions:
            action.help = argparse.SUPPRESS
        self.epilog = "\n\n".join(text for text in (self.folded_summary(), epilog) if text)
        try:
            return super().format_help()
        finally:
            for action, text in zip(actions, helps):
                action.help = text
            self.epilog = epilog

    def folded_summary(self) -> str:
        """The folded groups, a line (wrapped) of flag names each, under a title that says how to
        see them in full."""
        lines = [f"more options, by group ({self.prog} {HELP_ALL} explains each):"]
        for title, actions in self.folded.items():
            names = ", ".join(action.option_strings[-1] for action in actions)
            line = f"{title}: {names}"
            lines.append(
                textwrap.fill(line, WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
            )
        return "\n".join(lines)


def fold(parser: argparse.ArgumentParser, title: str, actions: Iterable[argparse.Action]) -> None:
    """Folds a group in ``parser``'s `--help` when it is a :class:`FoldingParser`; a plain parser
    (a test's, a script's) keeps its help as argparse writes it."""
    if isinstance(parser, FoldingParser):
        parser.fold(title, actions)


def add_help_all(parser: argparse.ArgumentParser) -> None:
    """`--help-all` on a :class:`FoldingParser`; nothing on a plain parser."""
    if isinstance(parser, FoldingParser):
        parser.add_help_all()


class FullHelp(argparse.Action):
    """`--help-all`: the parser's help with every group in full."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if isinstance(parser, FoldingParser):
            parser.full_help = True
        parser.print_help()
        parser.exit()
