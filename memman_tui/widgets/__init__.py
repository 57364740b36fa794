"""Widgets the screens share: gauge, countdown, chart, breakdown, event log, banner, daemon header
and the table whose selection only the user moves."""
