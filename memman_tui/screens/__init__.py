"""The screens of the terminal app: overview, session, context as sent, clients, memory, help and
the modal dialogs; each owns its layout and key bindings (from ``memman_tui.keymap``)."""
