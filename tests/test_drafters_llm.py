"""The LLM and file drafters: answers.py's rules, the real openai client against tests/fake_openai.py, the file exchange."""

import email.utils
import json
import os
import threading
import time

import openai
import pytest

from tests.fake_openai import FakeOpenAI, answer, delay, error
from tileagent import prompts
from tileagent.answers import answer_file, parse_answer
from tileagent.drafters.base import Draft, Drafter, DrafterUnavailable, DraftTask
from tileagent.drafters.file_drafter import FileDrafter, exchange_paths
from tileagent.drafters.openai_drafter import OpenAIDrafter

MODULE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
GOOD = f"Reasoning in a sentence.\n\n```python\n{MODULE}```\n"
MESSAGES = [{"role": "system", "content": "You write GPU kernels."}, {"role": "user", "content": "Task: relu"}]


def make_task(n=1, turn=1, run_dir="", messages=MESSAGES) -> DraftTask:
    return DraftTask(task_name="relu", reference_path="tasks/relu.py", reference_source="# ref", configs=[{}],
                     turn=turn, n=n, messages=messages, run_dir=str(run_dir))


class Sleeps(list):
    """An injected sleep: records each wait instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_drafter(server, sleeps=None, **kwargs) -> OpenAIDrafter:
    kwargs.setdefault("timeout_s", 5)
    return OpenAIDrafter("fake-model", base_url=server.base_url, api_key="sk-test", sleep=Sleeps() if sleeps is None else sleeps,
                         seed=0, **kwargs)


# -- answers.py ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, finish, problem", [
    ("I cannot help with that.", "stop", "no python code block"),
    ("", None, "no python code block"),
    (None, None, "no python code block"),
    ("```bash\nls\n```", None, "no python code block"),
    ("Thinking about tiles for a long", "length", "the answer is cut off before its code block"),
    ("```python\nx = 1\n```\nand\n```python\ny = 2\n```", "stop", "2 code blocks"),
    ("```python\na = 1\n```\n```py\nb = 2\n```\n```python3\nc = 3\n```", "stop", "3 code blocks"),
    ("```python\nx = 1\n```\n```python\ndef f(", "length", "2 code blocks"),
    ("```python\nimport torch\nclass ModelNew(torch.nn.Mod", "length",
     "the code block is cut off after its line 2: `class ModelNew(torch.nn.Mod`"),
    ("```python\nimport torch\n", "stop", "the code block is cut off after its line 1: `import torch`"),
    (f"```python\n{MODULE}", "length", f"the code block is cut off after its line {MODULE.count(chr(10))}: "
                                        f"`{MODULE.strip().splitlines()[-1].strip()}`"),
    ("```python\n\n\n```", "stop", "the code block is empty"),
    ("```python\nimport torch\n\ndef f(:\n    pass\n```", "stop",
     "the code block is not valid Python: line 3: invalid syntax"),
    ("```python\nif True:\nx = 1\n```", "stop",
     "the code block is not valid Python: line 2: expected an indented block after 'if' statement on line 1"),
])
def test_parse_answer_reports_exact_problem(text, finish, problem):
    parsed = parse_answer(text, finish)
    assert (parsed.source, parsed.problem) == (None, problem)
    rendered = prompts.render("feedback.malformed_answer", problem=parsed.problem)
    assert rendered.startswith(f"Your answer could not be used: {problem}.")


@pytest.mark.parametrize("text", [
    GOOD,
    f"```Python title=kernel.py\n{MODULE}```",
    f"```py\n{MODULE}```",
    f"```\n{MODULE}```",  # an untagged block when no python block exists
    f"Here:\n\n```python\n{MODULE}```\n\nThe output is:\n\n```text\nok\n```\n",  # other languages are ignored
    f"<think>\nFirst try:\n```python\nx = (\n```\n</think>\n```python\n{MODULE}```",  # drafts in thinking skipped
    f"```python\r\n{MODULE.replace(chr(10), chr(13) + chr(10))}```\r\n",
    f"  ```python\n  {MODULE.replace(chr(10), chr(10) + '  ').rstrip(' ')}  ```",  # an indented fence
    f"```python\n{MODULE}",  # the closing fence forgotten, no token limit: the module is whole (played LLM s. 38)
])
def test_parse_answer_extracts_the_module(text):
    parsed = parse_answer(text, "stop")
    assert parsed.ok and parsed.problem is None
    assert parsed.source == MODULE


def test_parse_answer_keeps_inner_fences_of_a_longer_fence():
    inner = 'DOC = """\n```python\nx = 1\n```\n"""\n'
    assert parse_answer(f"````python\n{inner}````").source == inner


def test_parse_answer_accepts_a_block_closed_before_the_token_limit():
    assert parse_answer(GOOD + "\nSome notes that got cu", "length").source == MODULE


def test_parse_answer_syntax_check_can_be_turned_off():
    assert parse_answer("```python\ndef f(:\n```", check_syntax=False).source == "def f(:\n"


# -- OpenAIDrafter against the fake server, with the real openai client ------------------------------------------------
def test_answer_file_gives_eval_the_python_block_of_a_saved_answer(tmp_path):
    """tileagent eval on a saved LLM answer (prose and one ```python block) evaluates the block; a Python file, and a
    file that is neither (the evaluator reports its syntax error), stay as they are."""
    module = "class ModelNew:\n    pass\n"
    answer = tmp_path / "turn1.py"
    answer.write_text(f"The kernel tiles rows.\n\n```python\n{module}```\n")
    block = answer_file(answer)
    assert block != answer and block.name == "turn1.py" and block.read_text() == module
    code = tmp_path / "code.py"
    code.write_text(module)
    assert answer_file(code) == code
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    assert answer_file(broken) == broken


def test_openai_drafter_drafts_and_sends_the_task_messages():
    with FakeOpenAI([answer(GOOD, prompt_tokens=120, completion_tokens=30)], api_key="sk-test") as server:
        drafter = make_drafter(server)
        drafts = drafter.draft(make_task())
    assert isinstance(drafter, Drafter) and drafter.name == "openai"
    assert drafts == [Draft(source=MODULE, response=GOOD, label="fake-model", prompt_tokens=120,
                            completion_tokens=30)]
    (request,) = server.chat_requests
    assert request.messages == MESSAGES
    assert request.body["model"] == "fake-model" and request.body["temperature"] == 0.2
    assert "n" not in request.body
    assert request.headers["authorization"] == "Bearer sk-test"


def test_openai_drafter_retries_429_and_5xx_then_succeeds():
    script = [error(429, retry_after=7), error(500), error(503, retry_after="0.5"), answer(GOOD)]
    sleeps = Sleeps()
    with FakeOpenAI(script) as server:
        drafter = make_drafter(server, sleeps)
        (draft,) = drafter.draft(make_task())
    assert draft.source == MODULE
    assert len(server.chat_requests) == 4 and server.remaining == 0
    assert sleeps[0] == 7 and sleeps[2] == 0.5  # Retry-After honoured
    assert 1.0 <= sleeps[1] <= 2.0  # backoff_s * 2**1 with jitter in [0.5, 1]
    assert drafter.usage.retries == 3 and drafter.usage.requests == 1


def test_openai_drafter_honours_retry_after_as_a_date_and_caps_it():
    in_30_s = email.utils.formatdate(time.time() + 30, usegmt=True)
    sleeps = Sleeps()
    script = [error(429, retry_after=in_30_s), error(429, retry_after=9999), error(429, retry_after="soon"),
              answer(GOOD)]
    with FakeOpenAI(script) as server:
        make_drafter(server, sleeps, max_retry_after_s=100).draft(make_task())
    assert 28 <= sleeps[0] <= 30 and sleeps[1] == 100 and 2 <= sleeps[2] <= 4  # "soon": the computed backoff


def test_openai_drafter_backoff_doubles_and_is_capped():
    sleeps = Sleeps()
    with FakeOpenAI([error(502)] * 4 + [answer(GOOD)]) as server:
        make_drafter(server, sleeps, backoff_s=1, max_backoff_s=3).draft(make_task())
    assert [0.5 <= s / cap <= 1 for s, cap in zip(sleeps, [1, 2, 3, 3])] == [True] * 4


def test_openai_drafter_gives_up_after_max_retries():
    sleeps = Sleeps()
    with FakeOpenAI([error(500, "overloaded")] * 3) as server:
        with pytest.raises(DrafterUnavailable, match="still failing after 2 retries: HTTP 500: overloaded"):
            make_drafter(server, sleeps, max_retries=2).draft(make_task())
    assert len(sleeps) == 2 and len(server.chat_requests) == 3


@pytest.mark.parametrize("status, message, hint", [
    (401, "Incorrect API key provided", "the API key was refused"),
    (404, "The model `fake-model` does not exist", "check --model"),
    (400, "bad request", "the endpoint rejected the request"),
])
def test_openai_drafter_does_not_retry_client_errors(status, message, hint):
    sleeps = Sleeps()
    with FakeOpenAI([error(status, message), answer(GOOD)]) as server:
        with pytest.raises(DrafterUnavailable) as info:
            make_drafter(server, sleeps).draft(make_task())
    assert f"HTTP {status}: {message}" in str(info.value) and hint in str(info.value)
    assert "sk-test" not in str(info.value)
    assert sleeps == [] and len(server.chat_requests) == 1


def test_openai_drafter_wrong_key_and_wrong_model_are_unavailable():
    with FakeOpenAI([answer(GOOD)], api_key="right", models=["fake-model"]) as server:
        with pytest.raises(DrafterUnavailable, match="401: Incorrect API key"):
            make_drafter(server).draft(make_task())
        wrong = OpenAIDrafter("no-such-model", base_url=server.base_url, api_key="right", sleep=Sleeps())
        with pytest.raises(DrafterUnavailable, match="404: The model `no-such-model` does not exist.*--model"):
            wrong.draft(make_task())
    assert server.remaining == 1


def test_openai_drafter_retries_a_timeout():
    sleeps = Sleeps()
    with FakeOpenAI([delay(5), answer(GOOD)]) as server:
        start = time.monotonic()
        (draft,) = make_drafter(server, sleeps, timeout_s=0.3).draft(make_task())
        assert time.monotonic() - start < 3
    assert draft.source == MODULE and len(sleeps) == 1 and len(server.chat_requests) == 2


def test_openai_drafter_does_not_retry_a_local_endpoint_that_refuses_connections():
    # #15: a refused connection to this machine means no server listens; retrying four times only waits
    with FakeOpenAI() as server:
        base_url = server.base_url  # the port is free again once the server is gone
    sleeps = Sleeps()
    drafter = OpenAIDrafter("m", base_url=base_url, sleep=sleeps, max_retries=4, timeout_s=2)
    with pytest.raises(DrafterUnavailable) as info:
        drafter.draft(make_task())
    assert str(info.value) == (f"model 'm' at {base_url}: connection refused; is the server running? (a local "
                               f"endpoint that refuses connections is not retried)")
    assert len(sleeps) == 0 and drafter.usage.retries == 0


@pytest.mark.parametrize("reply, problem", [
    (answer("Sure! Here is the idea, in prose."), "no python code block"),
    (answer("```python\nx = 1\n```\n```python\ny = 2\n```"), "2 code blocks"),
    (answer("```python\nimport torch\nclass ModelNew(torch.nn.Mo", finish_reason="length"),
     "the code block is cut off after its line 2: `class ModelNew(torch.nn.Mo`"),
    (answer(None), "no python code block"),
])
def test_openai_drafter_malformed_answer_is_a_draft_with_a_problem(reply, problem):
    with FakeOpenAI([reply]) as server:
        (draft,) = make_drafter(server).draft(make_task())
    assert draft.source is None and draft.problem == problem
    assert draft.response == (reply.content or "") and draft.prompt_tokens == 100


def test_openai_drafter_accounts_tokens_and_cost_across_turns():
    script = [answer(GOOD, prompt_tokens=1000, completion_tokens=200),
              answer(GOOD, prompt_tokens=3000, completion_tokens=400)]
    with FakeOpenAI(script) as server:
        drafter = make_drafter(server, price_per_mtok=(2.0, 8.0))
        (first,) = drafter.draft(make_task())
        (second,) = drafter.draft(make_task(turn=2))
    assert first.cost_usd == pytest.approx((1000 * 2 + 200 * 8) / 1e6)
    assert second.cost_usd == pytest.approx((3000 * 2 + 400 * 8) / 1e6)
    usage = drafter.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4000, 600, 4600)
    assert usage.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)
    assert usage.requests == 2 and not usage.estimated


def test_openai_drafter_estimates_missing_usage_and_flags_it():
    content = "```python\n" + "x = 1\n" * 10 + "```"  # 73 characters
    with FakeOpenAI([answer(content, prompt_tokens=None)]) as server:
        drafter = make_drafter(server, price_per_mtok=(1.0, 1.0))
        (draft,) = drafter.draft(make_task())
    prompt_chars = sum(len(m["content"]) for m in MESSAGES)
    assert draft.prompt_tokens == (prompt_chars + 3) // 4 and draft.completion_tokens == (len(content) + 3) // 4
    assert drafter.usage.estimated and drafter.usage.estimated_requests == 1
    assert draft.cost_usd == pytest.approx((draft.prompt_tokens + draft.completion_tokens) / 1e6)


def test_openai_drafter_n_candidates_when_the_server_ignores_n():
    script = [answer(GOOD), answer("no code"), answer(GOOD.replace("pass", "x = 1")), answer(GOOD), answer(GOOD)]
    with FakeOpenAI(script, n_mode="ignore") as server:
        drafter = make_drafter(server)
        drafts = drafter.draft(make_task(n=3))
        assert len(drafter.draft(make_task(n=2, turn=2))) == 2  # later turns: one candidate per request at once
    assert [r.body.get("n") for r in server.chat_requests] == [3, None, None, None, None]
    assert [d.problem for d in drafts] == [None, "no python code block", None]
    assert drafts[2].source == MODULE.replace("pass", "x = 1")
    assert drafter.n_supported is False and drafter.usage.requests == 5


def test_openai_drafter_n_candidates_in_one_request_when_supported():
    script = [answer(GOOD, 500, 10), answer("```python\nx = 1\n```", 500, 30)]
    with FakeOpenAI(script, n_mode="support") as server:
        drafter = make_drafter(server)
        drafts = drafter.draft(make_task(n=2))
    assert len(server.chat_requests) == 1 and server.chat_requests[0].body["n"] == 2
    assert [d.source for d in drafts] == [MODULE, "x = 1\n"]
    assert sum(d.prompt_tokens for d in drafts) == 500 and sum(d.completion_tokens for d in drafts) == 40
    assert drafts[1].prompt_tokens == 0 and drafter.n_supported is True


def test_openai_drafter_falls_back_when_n_is_rejected():
    with FakeOpenAI([answer(GOOD), answer(GOOD)], n_mode="reject") as server:
        drafter = make_drafter(server)
        drafts = drafter.draft(make_task(n=2))
    assert [d.source for d in drafts] == [MODULE, MODULE]
    assert [r.body.get("n") for r in server.chat_requests] == [2, None, None]
    assert drafter.n_supported is False and drafter.usage.retries == 0


def test_openai_drafter_keeps_drafts_when_a_later_candidate_fails():
    with FakeOpenAI([answer(GOOD), error(500), error(500)]) as server:
        drafts = make_drafter(server, max_retries=1).draft(make_task(n=2))
    assert [d.source for d in drafts] == [MODULE] and len(server.chat_requests) == 3


def test_openai_drafter_key_from_env_or_empty(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    with FakeOpenAI([answer(GOOD), answer(GOOD)]) as server:
        OpenAIDrafter("m", base_url=server.base_url, sleep=Sleeps()).draft(make_task())
        monkeypatch.delenv("OPENAI_API_KEY")
        OpenAIDrafter("m", base_url=server.base_url, sleep=Sleeps()).draft(make_task())
    assert [r.headers["authorization"] for r in server.chat_requests] == ["Bearer from-env", "Bearer EMPTY"]


def test_fake_server_lists_models_and_reports_an_exhausted_script():
    with FakeOpenAI([], models=["a", "b"]) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            assert [m.id for m in client.models.list()] == ["a", "b"]
            with pytest.raises(openai.BadRequestError, match="script exhausted"):
                client.chat.completions.create(model="a", messages=MESSAGES)


# -- FileDrafter ---------------------------------------------------------------------------------------------------------
def respond(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_file_drafter_writes_prompts_and_reads_responses_written_later(tmp_path, caplog):
    caplog.set_level("INFO", logger="tileagent.drafters.file_drafter")
    task = make_task(n=2, turn=3, run_dir=tmp_path)
    (_, r1), (_, r2) = exchange_paths(tmp_path, 3, 1), exchange_paths(tmp_path, 3, 2)

    def responder():
        for path, text in ((r2, "no code here"), (r1, GOOD)):
            while not path.with_name(path.name.replace("response", "prompt")).exists():
                time.sleep(0.005)
            time.sleep(0.05)
            respond(path, text)

    thread = threading.Thread(target=responder)
    thread.start()
    try:
        drafts = FileDrafter(poll_s=0.01, timeout_s=5).draft(task)
    finally:
        thread.join()
    assert [(d.source, d.problem) for d in drafts] == [(MODULE, None), (None, "no python code block")]
    assert drafts[0].response == GOOD and drafts[0].label == "file:t3-c1.response.md"
    prompt_md = (tmp_path / "exchange" / "t3-c1.prompt.md").read_text()
    assert "## system\n\nYou write GPU kernels." in prompt_md and "## user\n\nTask: relu" in prompt_md
    assert "t3-c1.response.md.tmp" in prompt_md
    meta = json.loads((tmp_path / "exchange" / "t3-c2.prompt.json").read_text())
    assert meta["messages"] == MESSAGES and meta["turn"] == 3 and meta["candidate"] == 2
    assert f"waiting for {r1}" in caplog.text


def test_file_drafter_uses_an_existing_response_at_once(tmp_path):
    prompt, response = exchange_paths(tmp_path, 1, 1)
    response.parent.mkdir(parents=True)
    respond(response, GOOD)
    clock = iter(range(100))
    drafter = FileDrafter(poll_s=60, timeout_s=0, clock=lambda: next(clock), sleep=pytest.fail)
    (draft,) = drafter.draft(make_task(run_dir=tmp_path))
    assert draft.source == MODULE and not prompt.exists()


def test_file_drafter_waits_for_an_in_place_write_to_settle(tmp_path):
    _, response = exchange_paths(tmp_path, 1, 1)
    polls = []

    def sleep(_):  # the responder writes in place, one half per poll
        polls.append(1)
        if len(polls) == 1:
            response.write_text(GOOD[:20])
        elif len(polls) == 2:
            response.write_text(GOOD)

    (draft,) = FileDrafter(poll_s=1, sleep=sleep).draft(make_task(run_dir=tmp_path))
    assert draft.source == MODULE and len(polls) == 3


def test_file_drafter_times_out(tmp_path):
    now = [0.0]

    def sleep(s):
        now[0] += s

    drafter = FileDrafter(poll_s=1, timeout_s=3, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(DrafterUnavailable, match=r"no response after 3 s: waited for .*t1-c1\.response\.md"):
        drafter.draft(make_task(run_dir=tmp_path))
    assert now[0] == 3


def test_file_drafter_needs_a_run_dir():
    with pytest.raises(DrafterUnavailable, match="run directory"):
        FileDrafter().draft(make_task())
