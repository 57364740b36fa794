"""The ``memman`` command line: ``cli`` (the console script), ``completion`` (shell completion
from its parser), ``demo`` (scripted agents for the terminal app) and ``launcher`` (``make run``).

It sits above the client library ``memman``, the daemon and the TUI: it may start any of them,
while the client library imports none of this package.
"""
