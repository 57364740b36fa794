"""memman's terminal app (Textual): watches the daemon live and lets a person fix memory.

``app`` (the app and its actions), ``screens/``, ``widgets/``, ``backend`` (the one door to the
daemon: the typed client), ``live`` (events coalesced per refresh tick), ``rows`` and ``sent``
(answers read into cells and parts), ``sample`` (a canned daemon for pictures and tests). It
talks to the daemon only through the client library ``memman`` and never imports the command
line (``memman_cli``), which starts it.
"""
