"""Modal dialogs: confirm, choose a promotion target, resolve a conflict, no daemon, errors."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

#: promotion targets offered by `p`: (target sent to the daemon, label, option it needs, prompt)
PROMOTION_TARGETS: tuple[tuple[str, str, str, str], ...] = (
    ("preference", "User preference (semantic: key → value)", "key", "preference key"),
    ("rule", "User rule (procedural: condition → action)", "condition", "when (condition)"),
    ("playbook", "Playbook (procedural: a successful flow)", "flow", "flow id"),
    ("business", "Business context (the tenant's agent.md)", "key", "section key (optional)"),
)


def suggest(field: str, snippet: dict[str, Any]) -> str:
    """A starting value for the option a target needs, from the snippet itself."""
    text = str(snippet.get("text") or "")
    if field == "flow":
        return str(snippet.get("flow") or "general")
    if field == "condition":
        return "always"
    words = [w.strip(".,;:!?\"'").lower() for w in text.split()]
    words = [w for w in words if w.isalnum() and len(w) > 3][:3]
    return "_".join(words) or "note"


class ConfirmScreen(ModalScreen[bool]):
    """Yes / no before a destructive action. ``y`` confirms, ``n`` / Esc cancels."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.body, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class PromoteScreen(ModalScreen[tuple[str, dict[str, Any]] | None]):
    """Choose where the snippet(s) go, then the key / condition / flow the target needs."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, snippets: list[dict[str, Any]]) -> None:
        super().__init__()
        self.snippets = snippets
        self.target: tuple[str, str, str, str] | None = None

    def compose(self) -> ComposeResult:
        first_text = str(self.snippets[0].get("text", "")) if self.snippets else ""
        with Vertical(classes="dialog"):
            yield Label(f"Promote {len(self.snippets)} snippet(s) to…", classes="dialog-title")
            yield Static(first_text[:300], classes="dialog-body")
            yield OptionList(*[Option(label, id=target)
                               for target, label, _f, _p in PROMOTION_TARGETS], id="targets")
            yield Input(id="promote-field")
            yield Static("Enter chooses, Esc cancels", classes="dialog-hint", id="promote-hint")

    def on_mount(self) -> None:
        self.query_one("#promote-field", Input).display = False
        self.query_one("#targets", OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.target = next(t for t in PROMOTION_TARGETS if t[0] == event.option.id)
        target, _label, field, prompt = self.target
        box = self.query_one("#promote-field", Input)
        box.placeholder = prompt
        box.border_title = f"{prompt} — Enter promotes"
        box.value = suggest(field, self.snippets[0] if self.snippets else {})
        box.display = True
        box.focus()
        self.query_one("#promote-hint", Static).update(
            f"promote to {target}: {prompt}; Enter promotes, Esc cancels")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.target is None:
            return
        target, _label, field, _prompt = self.target
        value = event.value.strip()
        if not value and target != "business":
            self.notify(f"{field} must not be empty", severity="warning")
            return
        self.dismiss((target, {field: value} if value else {}))

    def action_cancel(self) -> None:
        self.dismiss(None)


def in_keys(message: str) -> str:
    """The daemon's conflict message in this dialog's words: its advice to a program ("Pass
    replace=true to overwrite it ...") becomes the keys that do it here."""
    import re

    cut = re.split(r"[;.]?\s*[Pp]ass (?:opts\.)?replace=true\b", message, maxsplit=1)[0]
    if cut == message:
        return message
    return cut.rstrip(" ;.") + ". Press o to use the new value, k to keep the existing one."


class ConflictScreen(ModalScreen[str | None]):
    """A promotion would overwrite a different value: show both, let the user choose."""

    BINDINGS = [Binding("o", "choose('overwrite')", "Use new"),
                Binding("k", "choose('keep')", "Keep existing"),
                Binding("escape", "choose(None)", "Cancel")]

    def __init__(self, key: str, existing: Any, proposed: Any, message: str = "") -> None:
        super().__init__()
        self.key = key
        self.existing = existing
        self.proposed = proposed
        self.message = in_keys(message)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog conflict"):
            yield Label(f"Conflict on {self.key!r}", classes="dialog-title")
            if self.message:
                yield Static(self.message, classes="dialog-hint")
            yield Label("existing value", classes="conflict-label")
            yield Static(str(self.existing), id="existing", classes="conflict-value")
            yield Label("new value (from the scratchpad)", classes="conflict-label")
            yield Static(str(self.proposed), id="proposed", classes="conflict-value")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Use new (o)", id="overwrite", variant="warning")
                yield Button("Keep existing (k)", id="keep", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)


class NoDaemonScreen(ModalScreen[str]):
    """No daemon at the socket: offer to start one, retry, or quit."""

    BINDINGS = [Binding("s", "choose('start')", "Start daemon"),
                Binding("r", "choose('retry')", "Retry"),
                Binding("q,escape", "choose('quit')", "Quit")]

    def __init__(self, socket: str, reason: str) -> None:
        super().__init__()
        self.socket = socket
        self.reason = reason

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("No memman daemon is running", classes="dialog-title")
            yield Static(f"Nothing answers at {self.socket}\n({self.reason})\n\n"
                         "Start one now (s), retry (r) or quit (q).\n"
                         "To start it yourself: memman daemon  (or python -m memman_daemon)",
                         classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Start daemon (s)", id="start", variant="success")
                yield Button("Retry (r)", id="retry")
                yield Button("Quit (q)", id="quit", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "quit")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)


class ErrorScreen(ModalScreen[None]):
    """A failed action: what went wrong and what to do."""

    BINDINGS = [Binding("escape,enter,q", "close", "Close")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.title_text = title
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog error"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.message, classes="dialog-body")
            yield Static("Enter or Esc closes", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)
