"""``taccl report``: synthesize-and-compare over sizes and collectives, as one self-contained HTML page.

:mod:`~taccl_py.report.content` builds the jobs and assembles the results with their pictures;
:mod:`~taccl_py.report.html` renders the page.
"""

from taccl_py.report.content import (
           CollectiveResult,
           Picture,
           Report,
           ReportRequest,
           assemble_report,
           report_jobs,
)
from taccl_py.report.html import render_html

__all__ = ["CollectiveResult", "Picture", "Report", "ReportRequest", "assemble_report", "render_html",
           "report_jobs"]
