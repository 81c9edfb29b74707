"""The ``taccl`` command line: one module per command group, registered in :mod:`.main`."""
