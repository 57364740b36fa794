"""Token counts match what the chat API bills (OpenAI cookbook's published example)."""

from memman_daemon.tokens import OFFLINE_ENCODING, TokenCounter

# From OpenAI's cookbook "How to count tokens with tiktoken": the API reported
# usage.prompt_tokens == 129 for these messages on gpt-3.5-turbo-0613 and gpt-4-0613 (cl100k).
COOKBOOK = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client's project."},
]


def test_cookbook_example_bills_129_prompt_tokens() -> None:
    tc = TokenCounter()
    assert tc.count_messages(COOKBOOK, "gpt-4-0613") == 129
    assert tc.count_messages(COOKBOOK, "gpt-3.5-turbo-0613") == 129


def test_encoding_is_reported_and_unknown_models_count_with_the_default_models_encoding() -> None:
    tc = TokenCounter()
    # a model tiktoken does not know: memman's default model's encoding, not the last resort
    assert tc.encoding_name("some-local-model") == "o200k_base"
    # gpt-4 uses cl100k_base: the real table, offline, from a package that ships it
    assert tc.encoding_name("gpt-4-0613") == "cl100k_base"
    assert OFFLINE_ENCODING not in tc.sources and tc.fallbacks == {}


def test_overhead_per_message_and_name() -> None:
    tc = TokenCounter()
    plain = tc.count_message({"role": "user", "content": "hello"}, "gpt-4")
    named = tc.count_message({"role": "user", "content": "hello", "name": "ana"}, "gpt-4")
    # 3 frame + "user" (1) + "hello" (1)
    assert plain == 5
    assert named == plain + 1 + 1  # the name's own token + 1 per name
