"""`edgefd methods`: every method and its params, readable in a terminal of 100 columns."""

from edgefd import cli
from edgefd.algorithms.base import list_methods


def test_the_list_and_each_method_fit_100_columns(capsys):
    """The list was 133 lines up to 486 characters wide: each param's whole help on one line."""
    assert cli.main(["methods"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert max(map(len, listing)) <= 100
    names = [line.split()[0] for line in listing if line and not line.startswith(" ")]
    assert names[: len(list_methods())] == [method.name for method in list_methods()]
    assert "           params: threshold=0.6 temperature=1.0" in "\n".join(listing)
    for method in list_methods():
        assert cli.main(["methods", method.name]) == 0
        page = capsys.readouterr().out.splitlines()
        assert max(map(len, page)) <= 100, (method.name, max(page, key=len))


def test_wrapped_lines_keep_their_hanging_indent():
    from edgefd.algorithms.describe import WIDTH, wrapped

    lines = wrapped("name " + "word " * 40, indent=7)
    assert all(len(line) <= WIDTH for line in lines)
    assert all(line.startswith(" " * 7) for line in lines[1:])
