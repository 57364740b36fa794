"""The context window as a pipeline of small steps with plain data between them:
``timeline`` (the session's units, analysed once) -> ``candidates`` -> ``retrieve`` (the one
retriever, this session and the user's past sessions) -> ``select`` (the budget decides) ->
``summarize`` (lines of an entry too large to keep whole) -> ``render``; ``builder`` runs them
and measures exact token costs."""
