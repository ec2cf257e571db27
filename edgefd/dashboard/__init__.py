"""The run's page: a small, read-only view of a run for the person running it.

Live, `--dashboard HOST:PORT` on `edgefd server`, `deploy-local` and `simulate` serves it
(`edgefd.dashboard.http`) from a snapshot the command makes of its run; static, `edgefd report RUN
--html FILE` writes the same page for a finished run, in one self-contained file
(`edgefd.dashboard.page`). The page's data is plain JSON (`edgefd.dashboard.state`); its charts are
SVG drawn here (`edgefd.dashboard.charts`); every asset ships in the package, nothing is fetched
from a network. This package knows no method and no transport: the commands hand it dicts.
"""

from edgefd.dashboard.http import DashboardServer, parse_address
from edgefd.dashboard.page import static_page
from edgefd.dashboard.state import curve_of, finished_state, scores_of

__all__ = ["DashboardServer", "curve_of", "finished_state", "parse_address", "scores_of", "static_page"]
