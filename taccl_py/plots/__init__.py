"""Pictures: bandwidth versus size, the timeline of one algorithm, a topology, synthesis scaling.

Every function returns a matplotlib ``Figure`` built on the Agg canvas (no pyplot, no global state);
:func:`save_figure` writes it as PNG or SVG by the file suffix, byte-identical on every run, and
:func:`figure_bytes` gives the encoded bytes (for HTML reports). The CLI imports this package only when
a picture is asked for.
"""

from taccl_py.plots._files import FIGURE_FORMATS, check_figure_path, figure_bytes, save_figure
from taccl_py.plots.curves import SeriesKind, TimeSeries, algbw_figure
from taccl_py.plots.scaling import ScalingPoint, scaling_figure
from taccl_py.plots.timeline import TimelineRows, timeline_figure
from taccl_py.plots.topology_drawing import topology_figure

__all__ = ["FIGURE_FORMATS", "ScalingPoint", "SeriesKind", "TimeSeries", "TimelineRows", "algbw_figure",
           "check_figure_path", "figure_bytes", "save_figure", "scaling_figure", "timeline_figure",
           "topology_figure"]
