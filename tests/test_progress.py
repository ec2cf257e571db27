"""edgefd.progress: how a run's bars say sizes."""

from edgefd.progress import byte_size


def test_a_size_is_said_in_the_unit_that_shows_it():
    """deploy-local's bar said "up 0.00 MB" for a 5,337-byte run."""
    assert byte_size(5337) == "5.34 kB"
    assert [byte_size(n) for n in (0, 999, 1000, 2_500_000, 4.4e9)] == ["0 B", "999 B", "1.00 kB", "2.50 MB", "4.40 GB"]
