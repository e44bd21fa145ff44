"""The multi-turn text environment and its games: the registered ids pass both env checkers, each game answers
scripted turns exactly, replies are appended as tokens (the history never re-tokenized), truncation at the context
limit, the roles in info, and the one-line errors of games and game files."""

import itertools
import math
import re

import gymnasium as gym
import numpy as np
import pytest

import envs.text  # noqa: F401 - registers the multi-turn ids
from envs.text.games import (
    Calculator,
    CalculatorConfig,
    GameError,
    GameStep,
    GuessNumber,
    GuessNumberConfig,
    Mastermind,
    MastermindConfig,
    make_game,
)
from envs.text.games.mastermind import feedback
from envs.text.models import DEFAULT_MODEL
from envs.text.multi_turn import ENV_IDS, MultiTurnTextEnv, TokenRole, shared_tokenizer
from tests.conftest import passes_gymnasium_and_sb3_checkers

GAME_IDS = ["ppo/GuessNumber-v0", "ppo/Mastermind-v0", "ppo/Calculator-v0"]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return shared_tokenizer("tiny")


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """The default model's tokenizer, the very object ``gym.make`` on the defaults reads (loaded once)."""
    return shared_tokenizer(DEFAULT_MODEL)


class Echo:
    """A user's game: repeats the turn, rewards ``reward`` per turn, over when the turn says 'stop'."""

    def __init__(self, reward=0.5):
        self.reward = reward
        self.seed = None

    def reset(self, seed):
        self.seed = seed
        return f"Say something (episode {seed})."

    def step(self, turn_text):
        return GameStep(f"You said: {turn_text}", self.reward, "stop" in turn_text)


def end_turn(env, tokens):
    """Step ``tokens``; the last step's (observation, reward, terminated, truncated, info)."""
    for token in tokens:
        result = env.step(token)
    return result


def say(env, text):
    """The policy's turn: ``text``'s tokens, then the end-of-turn token."""
    return end_turn(env, env.unwrapped.encode(text) + [env.unwrapped.end_of_turn_id])


def real_tokens(observation):
    return observation["input_ids"][observation["attention_mask"] == 1].tolist()


# ---------------------------------------------------------------- registered ids and the checkers


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_registered_ids_pass_both_checkers_on_their_defaults(env_id, smollm2_tokenizer):
    env = gym.make(env_id)
    passes_gymnasium_and_sb3_checkers(env)
    unwrapped = env.unwrapped
    assert unwrapped.tokenizer is smollm2_tokenizer and env.action_space.n == 49152
    assert unwrapped.layout.reply_prefix == "<|im_start|>user\n", "SmolLM2 has a chat template: replies are user turns"
    assert unwrapped.max_turns == ENV_IDS[env_id]["max_turns"]


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_registered_ids_pass_both_checkers_with_the_tiny_model_and_no_template(env_id):
    env = gym.make(env_id, model="tiny", max_turn_tokens=4)
    passes_gymnasium_and_sb3_checkers(env)
    assert env.unwrapped.layout.reply_prefix == "\n", "the tiny tokenizer has no chat template"


def test_a_game_from_a_file_plays_through_the_generic_id(tmp_path, tiny_tokenizer):
    game_file = tmp_path / "my_game.py"
    game_file.write_text(
        "class Countdown:\n"
        "    def __init__(self, start=3):\n"
        "        self.start = start\n"
        "    def reset(self, seed):\n"
        "        self.left = self.start + seed % 2\n"
        "        return f'Count down from {self.left}.'\n"
        "    def step(self, turn_text):\n"
        "        self.left -= 1\n"
        "        return str(self.left), 1.0, self.left == 0\n"
    )
    env = gym.make("ppo/MultiTurn-v0", game=f"{game_file}:Countdown", game_options={"start": 2}, model="tiny")
    passes_gymnasium_and_sb3_checkers(env)
    _, info = env.reset(options={"game_seed": 0})
    assert info["game_seed"] == 0
    assert say(env, "two")[1:3] == (1.0, False)
    _, reward, terminated, truncated, info = say(env, "one")
    assert (reward, terminated, truncated, info["turn_rewards"]) == (1.0, True, False, [1.0, 1.0])


# ---------------------------------------------------------------- the games against scripted turns


def test_guess_number_answers_higher_lower_and_rewards_the_right_guess():
    game = GuessNumber(GuessNumberConfig(high=20))
    assert game.reset(7) == (
        "I am thinking of a whole number from 1 to 20. Guess it: reply with one number, "
        "and I will tell you whether my number is higher or lower."
    )
    target = game.target
    assert 1 < target < 20, "the script guesses both neighbours of the number: pick a seed that is not at an edge"
    low, high = target - 1, target + 1
    script = [
        ("no idea", GameStep("Reply with one whole number from 1 to 20.", 0.0, False)),
        ("maybe 25", GameStep("25 is not between 1 and 20. Guess again.", 0.0, False)),
        (f"I guess {low}.", GameStep(f"{low} is too low. My number is higher.", 0.0, False)),
        (f"Is it 3? No: {high}", GameStep(f"{high} is too high. My number is lower.", 0.0, False)),
        (f"{target}", GameStep(f"{target} is right!", 1.0, True)),
    ]
    for turn, expected in script:
        assert game.step(turn) == expected


def test_guess_number_is_deterministic_from_the_seed_and_covers_the_range():
    game = GuessNumber(GuessNumberConfig(high=5))
    targets = []
    for seed in range(200):
        game.reset(seed)
        targets.append(game.target)
    again = GuessNumber(GuessNumberConfig(high=5))
    again.reset(3)
    assert again.target == targets[3] and set(targets) == {1, 2, 3, 4, 5}
    with pytest.raises(GameError, match="guess-number needs high >= 2"):
        GuessNumberConfig(high=1)


def test_mastermind_feedback_counts_exact_and_partial_pegs():
    assert feedback((1, 2, 3), (1, 2, 3)) == (3, 0)
    assert feedback((1, 1, 2), (1, 2, 1)) == (1, 2)
    assert feedback((3, 3, 3), (3, 1, 1)) == (1, 0), "repeated guess digits count once per code digit"
    assert feedback((2, 1, 4), (1, 2, 3)) == (0, 2)
    assert feedback((4, 4, 4), (1, 2, 3)) == (0, 0)


def test_mastermind_answers_guesses_and_rewards_the_cracked_code():
    game = Mastermind(MastermindConfig(positions=3, colours=4))
    assert game.reset(11).startswith("I have a secret code of 3 digits, each from 1 to 4 (digits may repeat).")
    code = game.code
    assert len(code) == 3 and set(code) <= {1, 2, 3, 4}
    wrong = tuple(1 + c % 4 for c in code)  # every digit shifted: no digit in its place
    exact, partial = feedback(wrong, code)
    wrong_text = " ".join(map(str, wrong))
    code_text = " ".join(map(str, code))
    script = [
        ("I am not sure", GameStep("Reply with 3 digits, each from 1 to 4.", 0.0, False)),
        ("1234", GameStep("Reply with 3 digits, each from 1 to 4.", 0.0, False)),
        (
            f"digits from 1 to 4... my guess: {', '.join(map(str, wrong))}.",
            GameStep(
                f"{wrong_text}: {exact} right in the right place, {partial} right in the wrong place.", 0.0, False
            ),
        ),
        (
            f"{wrong_text} or rather {''.join(map(str, code))}",
            GameStep(f"{code_text}: all right, you cracked the code!", 1.0, True),
        ),
    ]
    assert exact == 0
    for turn, expected in script:
        assert game.step(turn) == expected
    again = Mastermind()
    again.reset(11)
    assert again.code == code


def test_mastermind_peg_reward_pays_each_digit_in_its_place_beyond_the_best_earlier_guess():
    game = Mastermind(MastermindConfig(positions=3, colours=4, peg_reward=0.2))
    game.reset(11)
    code = game.code
    one_in_place = " ".join(map(str, (code[0], 1 + code[1] % 4, 1 + code[2] % 4)))
    two_in_place = " ".join(map(str, (code[0], code[1], 1 + code[2] % 4)))
    none_in_place = " ".join(str(1 + c % 4) for c in code)
    rewards = [game.step(turn).reward for turn in ["no guess here", one_in_place, one_in_place, two_in_place]]
    rewards += [game.step(turn).reward for turn in [none_in_place, one_in_place]]
    assert rewards == pytest.approx([0.0, 0.2, 0.0, 0.2, 0.0, 0.0])  # a repeat or a worse guess earns nothing
    game.reset(11)
    assert game.step(two_in_place).reward == pytest.approx(0.4), "a new episode starts from no digit in place"
    assert game.step(" ".join(map(str, code))) == GameStep(
        f"{' '.join(map(str, code))}: all right, you cracked the code!", 1.0, True
    )
    for bad in (-0.1, 0.5, float("nan")):  # 0.5 x 2 digits in place would score as much as cracking
        with pytest.raises(GameError, match=r"^mastermind needs a peg_reward from 0 to below 1 / \(positions - 1\)"):
            MastermindConfig(positions=3, peg_reward=bad)


def test_calculator_computes_calls_and_scores_the_answer_turn():
    game = Calculator(CalculatorConfig())
    opening = game.reset(5)
    a, b = game.numbers
    assert opening.startswith(f"What is {a} * {b}? You may use a calculator: write calc: followed by an expression")
    assert 100 <= a <= 999 and 100 <= b <= 999 and game.answer == a * b
    syntax = "Write calc: EXPRESSION to use the calculator, or answer: NUMBER to answer."
    refused = "it uses something other than whole numbers, + - * and parentheses."
    script = [
        ("Let me think.", GameStep(syntax, 0.0, False)),
        (f"First, calc: {a} * {b}, please", GameStep(f"{a} * {b} = {a * b}", 0.0, False)),
        ("CALC: (2 + 3) * -4", GameStep("(2 + 3) * -4 = -20", 0.0, False)),
        ("calc: 7 / 2", GameStep(f"The calculator cannot compute '7 / 2': {refused}", 0.0, False)),
        ("calc: 2 ** 300", GameStep(f"The calculator cannot compute '2 ** 300': {refused}", 0.0, False)),
        ("calc: 1 +", GameStep("The calculator cannot compute '1 +': it is not an expression.", 0.0, False)),
        (f"calc: 1 + 1 and the Answer: {a * b}", GameStep("Correct.", 1.0, True)),
    ]
    for turn, expected in script:
        assert game.step(turn) == expected
    game.reset(5)
    assert game.step(f"answer: {a * b:,}, I think.") == GameStep("Correct.", 1.0, True), "thousands commas are read"
    game.reset(5)
    assert game.step(f"answer: {a * b + 1}") == GameStep(f"Wrong: the answer is {a * b}.", 0.0, True)


def test_calculator_last_number_answers_read_a_turn_without_tags_as_its_last_whole_number():
    game = Calculator(CalculatorConfig(operation="+", digits=1, answer_format="last-number"))
    game.reset(3)
    a, b = game.numbers
    syntax = "Write calc: EXPRESSION to use the calculator, or answer: NUMBER to answer."
    assert game.step("Let me think.") == GameStep(syntax, 0.0, False), "a turn with no number still gets the syntax"
    assert game.step(f"calc: {a} + {b} and then 7") == GameStep(f"{a} + {b} = {a + b}", 0.0, False), "calls win"
    assert game.step(f"{a} + {b} = {a + b}.") == GameStep("Correct.", 1.0, True)
    game.reset(3)
    assert game.step(f"It is {a + b}, or answer: {a + b + 1}") == GameStep(f"Wrong: the answer is {a + b}.", 0.0, True)
    big = Calculator(CalculatorConfig(digits=3, answer_format="last-number"))
    big.reset(5)
    assert big.step(f"So {big.answer:,}!") == GameStep("Correct.", 1.0, True), "thousands commas are one number"
    big.reset(5)
    assert big.step("1, 2, 3") == GameStep(f"Wrong: the answer is {big.answer}.", 0.0, True), "a list is not 123"
    assert Calculator(CalculatorConfig(digits=1)).step("7") == GameStep(syntax, 0.0, False), "tagged: no bare answers"
    with pytest.raises(GameError, match=r"^calculator answer_format 'bare' is not one of tagged, last-number$"):
        CalculatorConfig(answer_format="bare")


def test_calculator_sums_and_limits_expressions():
    game = Calculator(CalculatorConfig(operation="+", terms=5, digits=2))
    opening = game.reset(0)
    assert len(game.numbers) == 5 and all(10 <= n <= 99 for n in game.numbers)
    assert opening.startswith("What is " + " + ".join(map(str, game.numbers)) + "?")
    long_call = "+".join(["1"] * 41)
    assert game.step(f"calc: {long_call}").reply == (
        f"The calculator cannot compute '{long_call}': it is longer than 80 characters."
    )
    with pytest.raises(GameError, match=r"calculator operation '/' is not one of \*, \+"):
        CalculatorConfig(operation="/")


# ---------------------------------------------------------------- tokens: appended, never re-tokenized


def test_observation_is_the_prompt_then_each_turn_then_each_reply_exactly(tiny_tokenizer):
    env = MultiTurnTextEnv(game=Echo(), tokenizer=tiny_tokenizer, max_turns=3, max_turn_tokens=8)
    observation, info = env.reset(options={"game_seed": 4})
    prompt = tiny_tokenizer("Say something (episode 4).\n", add_special_tokens=False)["input_ids"]
    assert real_tokens(observation) == prompt and info["turns"] == 0 and info["turn_rewards"] == []
    # a turn spelled letter by letter is not how the tokenizer would write it: re-tokenizing would change it
    spelled = [tiny_tokenizer.convert_tokens_to_ids(letter) for letter in "movie"]
    assert tiny_tokenizer("movie", add_special_tokens=False)["input_ids"] != spelled
    first_turn = spelled + [env.end_of_turn_id]
    observation, reward, terminated, truncated, info = end_turn(env, first_turn)
    assert (reward, terminated, truncated, info["turn_text"]) == (0.5, False, False, "movie")
    first_reply = tiny_tokenizer("\nYou said: movie\n", add_special_tokens=False)["input_ids"]
    # a turn cut at max_turn_tokens (8) without the end-of-turn token
    second_turn = env.encode(" the film was good and the story was bad and the plot was boring")[:8]
    assert len(second_turn) == 8 and env.end_of_turn_id not in second_turn
    observation, reward, terminated, truncated, info = end_turn(env, second_turn)
    second_reply = tiny_tokenizer(f"\nYou said: {info['turn_text']}\n", add_special_tokens=False)["input_ids"]
    third_turn = tiny_tokenizer("stop", add_special_tokens=False)["input_ids"] + [env.end_of_turn_id]
    observation, reward, terminated, truncated, info = end_turn(env, third_turn)
    assert (reward, terminated, truncated, info["turns"]) == (0.5, True, False, 3)
    assert info["reply"] == "You said: stop", "the final reply is reported but not appended: nothing follows it"
    segments = [
        (prompt, TokenRole.PROMPT),
        (first_turn, TokenRole.POLICY),
        (first_reply, TokenRole.ENVIRONMENT),
        (second_turn, TokenRole.POLICY),
        (second_reply, TokenRole.ENVIRONMENT),
        (third_turn, TokenRole.POLICY),
    ]
    expected = [token for tokens, _ in segments for token in tokens]
    assert real_tokens(observation) == expected
    roles = [int(role) for tokens, role in segments for _ in tokens]
    assert info["roles"][: len(expected)].tolist() == roles
    assert (info["roles"][len(expected) :] == TokenRole.PADDING).all() and info["roles"].dtype == np.int8
    assert info["turn_rewards"] == [0.5, 0.5, 0.5]
    with pytest.raises(RuntimeError, match="the episode is over"):
        env.step(0)


def test_chat_template_wraps_replies_as_user_turns_and_matches_the_rendered_dialogue(smollm2_tokenizer):
    env = MultiTurnTextEnv(game=Echo(), tokenizer=smollm2_tokenizer, max_turns=4, max_turn_tokens=6)
    observation, _ = env.reset(options={"game_seed": 1})
    opening = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say something (episode 1)."}], tokenize=False, add_generation_prompt=True
    )
    assert real_tokens(observation) == env.encode(opening)
    say(env, "hello")
    observation, _, _, _, info = say(env, "again")
    dialogue = [
        {"role": "user", "content": "Say something (episode 1)."},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "You said: hello"},
        {"role": "assistant", "content": "again"},
        {"role": "user", "content": "You said: again"},
    ]
    rendered = smollm2_tokenizer.apply_chat_template(dialogue, tokenize=False, add_generation_prompt=True)
    assert smollm2_tokenizer.decode(real_tokens(observation)) == rendered
    ids, roles = real_tokens(observation), info["roles"]
    policy = [token for token, role in zip(ids, roles) if role == TokenRole.POLICY]
    assert policy == env.encode("hello") + [env.end_of_turn_id] + env.encode("again") + [env.end_of_turn_id]
    # a turn cut at the limit: the environment closes it with <|im_end|>, an environment token
    cut = env.encode(" one two three four five six seven")[:6]
    observation, _, _, _, info = end_turn(env, cut)
    appended = real_tokens(observation)[len(ids) + len(cut) :]
    assert appended[0] == env.end_of_turn_id and (info["roles"][len(ids) + len(cut)] == TokenRole.ENVIRONMENT)
    reply = f"You said: {info['turn_text']}"
    assert (
        smollm2_tokenizer.decode(appended)
        == f"<|im_end|>\n<|im_start|>user\n{reply}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_truncated_when_the_context_is_full_mid_turn_or_the_reply_does_not_fit(tiny_tokenizer):
    prompt_length = len(tiny_tokenizer("Say something (episode 0).\n", add_special_tokens=False)["input_ids"])
    env = MultiTurnTextEnv(
        game=Echo(), tokenizer=tiny_tokenizer, max_turn_tokens=10, max_context_tokens=prompt_length + 3
    )
    env.reset(options={"game_seed": 0})
    token = env.encode(" the")[0]
    for _ in range(2):
        assert env.step(token)[1:4] == (0.0, False, False)
    observation, reward, terminated, truncated, info = env.step(token)
    assert (reward, terminated, truncated, info["turns"]) == (0.0, False, True, 0), "full before the turn ended"
    assert int(observation["attention_mask"].sum()) == prompt_length + 3
    with pytest.raises(RuntimeError, match="the episode is over"):
        env.step(token)
    env.reset(options={"game_seed": 0})
    observation, reward, terminated, truncated, info = end_turn(env, [token, env.end_of_turn_id])
    assert (reward, terminated, truncated) == (0.5, False, True), "the turn is scored, then its reply does not fit"
    assert info["reply"] == "You said:  the"
    assert real_tokens(observation)[prompt_length:] == [token, env.end_of_turn_id], "the reply is not appended"
    assert info["turn_rewards"] == [0.5]


def test_terminated_at_the_turn_limit_and_when_the_game_is_over(tiny_tokenizer):
    env = gym.make("ppo/GuessNumber-v0", tokenizer=tiny_tokenizer, max_turns=2, game_options={"high": 3})
    _, info = env.reset(seed=0)
    target = env.unwrapped.game.target
    wrong = 1 if target != 1 else 2
    assert say(env, str(wrong))[1:4] == (0.0, False, False)
    _, reward, terminated, truncated, info = say(env, str(wrong))
    assert (reward, terminated, truncated, info["turn_rewards"]) == (0.0, True, False, [0.0, 0.0])
    env.reset(seed=0)
    _, reward, terminated, truncated, info = say(env, str(target))
    assert (reward, terminated, truncated, info["turns"], info["reply"]) == (1.0, True, False, 1, f"{target} is right!")


def test_game_seeds_come_from_the_env_seed_or_the_options(tiny_tokenizer):
    env = MultiTurnTextEnv(game=Echo(), tokenizer=tiny_tokenizer)
    seeds = [env.reset(seed=3)[1]["game_seed"], env.reset()[1]["game_seed"], env.reset(seed=3)[1]["game_seed"]]
    assert seeds[0] == seeds[2] != seeds[1]
    assert env.reset(seed=3, options={"game_seed": 42})[1]["game_seed"] == 42 and env.game.seed == 42


# ---------------------------------------------------------------- one-line errors


class Raising(Echo):
    def step(self, turn_text):
        raise LookupError("no such\nstate")


class NotFinite(Echo):
    def step(self, turn_text):
        return "fine", math.nan, False


class NumberReply(Echo):
    def step(self, turn_text):
        return 5, 0.0, False


class ListResult(Echo):
    def step(self, turn_text):
        return ["reply", 0.0, False]


class IntDone(Echo):
    def step(self, turn_text):
        return "reply", 0.0, 1


class EmptyOpening(Echo):
    def reset(self, seed):
        return ""


@pytest.mark.parametrize(
    ("game", "message"),
    [
        (Raising(), "raised LookupError: no such state; fix the game's step"),
        (NotFinite(), "returned the reward nan; return a finite number"),
        (NumberReply(), "replied with 5, not text; return the reply as a str"),
        (ListResult(), "returned list, not a (reply, reward, done) tuple; return a GameStep"),
        (IntDone(), "returned done=1, not a bool; return True or False"),
    ],
)
def test_a_failing_game_step_is_one_line_naming_the_game_seed_and_turn(game, message, tiny_tokenizer):
    env = MultiTurnTextEnv(game=game, tokenizer=tiny_tokenizer)
    env.reset(options={"game_seed": 9})
    where = f"game {type(game).__name__} (episode seed 9, turn 1)"
    with pytest.raises(GameError, match=f"^{re.escape(where)} {re.escape(message)}$"):
        say(env, "hi")


def test_the_turn_in_an_error_counts_from_one(tiny_tokenizer):
    class FailsSecond(Echo):
        def step(self, turn_text):
            if self.seed is None:
                raise ValueError("boom")
            self.seed = None
            return "ok", 0.0, False

    env = MultiTurnTextEnv(game=FailsSecond(), tokenizer=tiny_tokenizer)
    env.reset(options={"game_seed": 2})
    say(env, "first")
    with pytest.raises(GameError, match=r"^game FailsSecond \(episode seed 2, turn 2\) raised ValueError: boom"):
        say(env, "second")


def test_a_failing_reset_or_an_opening_that_does_not_fit_is_one_line(tiny_tokenizer):
    with pytest.raises(GameError, match=r"^game EmptyOpening \(episode seed 1, at reset\) returned '' as its opening"):
        MultiTurnTextEnv(game=EmptyOpening(), tokenizer=tiny_tokenizer).reset(options={"game_seed": 1})
    small = MultiTurnTextEnv(game=Echo(), tokenizer=tiny_tokenizer, max_context_tokens=4)
    with pytest.raises(
        GameError, match=r"^game Echo \(episode seed 1, at reset\) opens with \d+ tokens, leaving no room"
    ):
        small.reset(options={"game_seed": 1})
    with pytest.raises(GameError, match="^int is not a Game: give it reset"):
        MultiTurnTextEnv(game=3, tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="the tokenizer has no chat template; pass chat_template=False"):
        MultiTurnTextEnv(game=Echo(), tokenizer=tiny_tokenizer, chat_template=True)


def test_game_files_and_names_fail_in_one_line(tmp_path):
    game_file = tmp_path / "games.py"
    game_file.write_text(
        "def not_a_class(seed):\n    return 'hi'\n"
        "class NoStep:\n    def reset(self, seed):\n        return 'hi'\n"
        "class NeedsArgument:\n    def __init__(self, size):\n        pass\n"
        "    def reset(self, seed):\n        return 'hi'\n    def step(self, text):\n        return 'x', 0.0, True\n"
    )
    broken_file = tmp_path / "broken.py"
    broken_file.write_text("raise RuntimeError('cannot start')\n")
    missing = tmp_path / "missing.py"
    cases = [
        (f"{missing}:Game", f"game file {missing} does not exist; pass the path of a .py file"),
        (f"{game_file}:Missing", f"game file {game_file} has no class 'Missing'; check the name after the ':'"),
        (f"{game_file}:not_a_class", f"'not_a_class' in game file {game_file} is not a Game class; give a class with"),
        (f"{game_file}:NoStep", f"'NoStep' in game file {game_file} is not a Game class"),
        (
            f"{game_file}:NeedsArgument",
            f"building game NeedsArgument from '{game_file}:NeedsArgument' raised TypeError",
        ),
        (f"{broken_file}:Game", f"importing game file {broken_file} failed with RuntimeError: cannot start"),
        ("no_such_module_xyz:Game", "cannot import game module 'no_such_module_xyz'"),
        (f"{game_file}:", f"game '{game_file}:' must look like 'path/to/file.py:ClassName' or 'module:ClassName'"),
        ("chess", "unknown game 'chess'; known games: guess-number, mastermind, calculator, or 'path/to/file.py:"),
    ]
    for spec, message in cases:
        with pytest.raises(GameError, match=f"^{re.escape(message)}") as raised:
            make_game(spec)
        assert "\n" not in str(raised.value), spec
    with pytest.raises(
        GameError, match="^the mastermind game has no option 'pegs'; its options: positions, colours, peg_reward$"
    ):
        make_game("mastermind", {"pegs": 4})
    with pytest.raises(GameError, match=f"^{re.escape(f'game file {missing} does not exist')}"):
        gym.make("ppo/MultiTurn-v0", game=f"{tmp_path}/missing.py:Game", model="tiny")


def test_the_replies_suffice_to_win_every_episode_within_the_registered_turn_limits():
    """Bisection on guess-number's replies and a player who keeps only the codes consistent with every mastermind
    reply win every episode within the registered ids' turn limits: the replies carry what good play needs."""
    guess_number = GuessNumber()
    for seed in range(60):
        guess_number.reset(seed)
        low, high, turns, done = 1, 20, 0, False
        while not done:
            middle = (low + high) // 2
            reply, reward, done = guess_number.step(f"Is it {middle}?")
            turns += 1
            low, high = (middle + 1, high) if "higher" in reply else (low, middle - 1)
        assert reward == 1.0 and turns <= ENV_IDS["ppo/GuessNumber-v0"]["max_turns"]
    mastermind = Mastermind()
    codes = list(itertools.product(range(1, 5), repeat=3))
    seen = set()
    for seed in range(300):
        mastermind.reset(seed)
        seen.add(mastermind.code)
        candidates, turns, done = list(codes), 0, False
        while not done:
            guess = candidates[0]
            reply, reward, done = mastermind.step(" ".join(map(str, guess)))
            turns += 1
            exact, partial = (3, 0) if done else map(int, re.findall(r"(\d) right", reply))
            candidates = [code for code in candidates if feedback(guess, code) == (exact, partial)]
        assert reward == 1.0 and turns <= ENV_IDS["ppo/Mastermind-v0"]["max_turns"]
    assert len(seen) > 50, "the seeds reach most of the 64 codes"
