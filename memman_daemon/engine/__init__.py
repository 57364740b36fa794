"""The context pipeline: cycles, compression, scoring, the budgeted context window, usage,
export / import, and the engine that runs them over the session log."""
