"""The DAG spec and the domain rules around it: pure code, no I/O.

Everything here takes its inputs as arguments (spec, time, states) so the
scheduler, the handlers and the CLI share one definition of a valid DAG.
Import the modules (`from sluice.spec import models, validation`), not names.
"""
