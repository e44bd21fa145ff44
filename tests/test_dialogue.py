"""Issue #27, the batched multi-turn form: dialogues sampled with one key/value cache across turns have the log-probs
of a plain forward of the whole sequences, the tokens of any batching, the tokens and roles the environment writes
for the same actions, a flat cost per token (nothing recomputed at later turns), and the games' one-line errors."""

import copy
from dataclasses import replace

import pytest
import torch
from torch import nn

from agents.text.actor_critic import position_ids_from_mask
from agents.text.dialogue import DialogueSettings, SampledDialogues, sample_dialogues
from agents.text.rollout import left_pad
from envs.text.games import GameError, GameStep, GuessNumber, GuessNumberConfig
from envs.text.models import build_tiny_model
from envs.text.multi_turn import MultiTurnTextEnv, TokenRole

TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|endoftext|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""A small chat template for the tiny tokenizer, closing every turn with its EOS as SmolLM2's closes with <|im_end|>."""
SETTINGS = DialogueSettings(max_turns=4, max_turn_tokens=10, max_context_tokens=256, temperature=0.7)
"""256: the tiny GPT-2's n_positions; 10 tokens a turn, so some turns end at EOS and others at the limit."""


class Countdown:
    """Over after ``1 + seed % 4`` turns; openings and replies of seed- and turn-dependent lengths; the reward is
    the decoded turn's length, so it depends on what was sampled."""

    def reset(self, seed):
        self.seed, self.turn = seed, 0
        return "Talk to me" + " please" * (seed % 3) + "."

    def step(self, turn_text):
        self.turn += 1
        reply = "ok" + " and" * ((self.seed + self.turn) % 4) + f" turn {self.turn}"
        return GameStep(reply, len(turn_text) / 10, self.turn >= 1 + self.seed % 4)


class Endless:
    """Never over: the turn limit ends the episode."""

    def reset(self, seed):
        return f"Keep talking ({seed})."

    def step(self, turn_text):
        return GameStep("go on", 0.0, False)


class Boom(Endless):
    """Raises on its second turn."""

    def reset(self, seed):
        self.turn = 0
        return super().reset(seed)

    def step(self, turn_text):
        self.turn += 1
        if self.turn == 2:
            raise RuntimeError("the board\nbroke")
        return super().step(turn_text)


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model()


@pytest.fixture(scope="module")
def talkative(tiny):
    """The tiny model with its EOS logit raised by 2.5 (3.6 at temperature 0.7: about e^3.6 / 384, one token in ten,
    ends the turn), so turns end at EOS and at the limit alike: a random model almost never samples EOS."""
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    head = nn.Linear(model.lm_head.in_features, model.lm_head.out_features)
    head.weight = model.lm_head.weight
    nn.init.zeros_(head.bias)
    head.bias.data[tokenizer.eos_token_id] = 2.5
    model.lm_head = head
    return model, tokenizer


@pytest.fixture(scope="module")
def templated_tokenizer(tiny):
    tokenizer = copy.deepcopy(tiny[1])
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def mixed_games():
    """Four scripted games of unequal lengths and two shipped ones: (games, seeds)."""
    seeds = [0, 1, 2, 3, 11, 12]
    return [Countdown() for _ in range(4)] + [GuessNumber(GuessNumberConfig(high=50)) for _ in range(2)], seeds


def fresh(game):
    return GuessNumber(game.config) if isinstance(game, GuessNumber) else type(game)()


def uniforms_for(batch, settings, seed=0):
    return torch.rand(
        batch, settings.max_turns, settings.max_turn_tokens, generator=torch.Generator().manual_seed(seed)
    )


def sample(model, tokenizer, settings=SETTINGS, seed=0):
    games, seeds = mixed_games()
    return sample_dialogues(model, games, tokenizer, seeds, uniforms_for(len(games), settings, seed), settings)


def row_tokens(dialogues: SampledDialogues, b: int) -> list[int]:
    return dialogues.input_ids[b, dialogues.attention_mask[b].bool()].tolist()


def turn_lengths(dialogues: SampledDialogues, b: int) -> list[int]:
    """Lengths of row ``b``'s runs of policy tokens."""
    lengths, previous = [], None
    for role in dialogues.roles[b].tolist():
        if role == TokenRole.POLICY and previous == TokenRole.POLICY:
            lengths[-1] += 1
        elif role == TokenRole.POLICY:
            lengths.append(1)
        previous = role
    return lengths


def test_multi_turn_log_probs_equal_a_plain_forward_of_the_whole_left_padded_sequences(talkative):
    model, tokenizer = talkative
    dialogues = sample(model, tokenizer)
    eos = tokenizer.eos_token_id
    policy = dialogues.roles == TokenRole.POLICY
    assert len(set(dialogues.turns.tolist())) >= 3, "unequal turn counts"
    assert len(set(dialogues.attention_mask.sum(-1).tolist())) >= 3, "unequal lengths"
    lengths = [n for b in range(len(dialogues.turns)) for n in turn_lengths(dialogues, b)]
    assert ((dialogues.input_ids == eos) & policy).any() and SETTINGS.max_turn_tokens in lengths, "both turn ends"
    assert (dialogues.roles == TokenRole.ENVIRONMENT).any() and dialogues.terminated.all()
    ids, mask = left_pad([row_tokens(dialogues, b) for b in range(len(dialogues.turns))], tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        logits = model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False
        ).logits
    logp = torch.log_softmax(logits[:, :-1].float() / SETTINGS.temperature, -1).gather(-1, ids[:, 1:, None])[..., 0]
    for b in range(len(dialogues.turns)):
        n = int(dialogues.attention_mask[b].sum())
        at_policy = policy[b, 1:n]
        torch.testing.assert_close(
            logp[b, -(n - 1) :][at_policy], dialogues.sampled_logp[b, 1:n][at_policy], atol=2e-5, rtol=0
        )
    assert (dialogues.sampled_logp[~policy] == 0).all()


def test_any_batching_samples_the_same_dialogues_from_the_same_uniforms(talkative):
    model, tokenizer = talkative
    games, seeds = mixed_games()
    uniforms = uniforms_for(len(games), SETTINGS)
    whole = sample_dialogues(model, games, tokenizer, seeds, uniforms, SETTINGS)
    for size in (1, 4):
        for start in range(0, len(games), size):
            part_games = [fresh(game) for game in games[start : start + size]]
            part = sample_dialogues(
                model, part_games, tokenizer, seeds[start : start + size], uniforms[start : start + size], SETTINGS
            )
            for row in range(len(part_games)):
                b, n = start + row, int(part.attention_mask[row].sum())
                assert row_tokens(part, row) == row_tokens(whole, b)
                assert torch.equal(part.roles[row, :n], whole.roles[b, :n])
                torch.testing.assert_close(part.sampled_logp[row, :n], whole.sampled_logp[b, :n], atol=1e-5, rtol=0)
                assert torch.equal(part.turn_rewards[row], whole.turn_rewards[b])
                assert torch.equal(part.turn_ends[row], whole.turn_ends[b])
                assert part.texts[row] == whole.texts[b]


@pytest.mark.parametrize("template", [False, True], ids=["plain", "chat-template"])
@pytest.mark.parametrize("context", [256, 128], ids=["room", "truncating"])
def test_the_environment_stepping_the_sampled_tokens_writes_the_same_dialogue(
    template, context, talkative, templated_tokenizer
):
    model, plain_tokenizer = talkative
    tokenizer = templated_tokenizer if template else plain_tokenizer
    settings = DialogueSettings(
        max_turns=SETTINGS.max_turns,
        max_turn_tokens=SETTINGS.max_turn_tokens,
        max_context_tokens=context,
        temperature=SETTINGS.temperature,
        chat_template=template,
    )
    games, seeds = mixed_games()
    dialogues = sample(model, tokenizer, settings)
    if template:
        assert dialogues.texts[0].startswith("<|user|>\nTalk to me.<|endoftext|>\n<|assistant|>\n")
    if context < SETTINGS.max_context_tokens:
        assert dialogues.truncated.any() and not dialogues.truncated.all()
    else:
        assert dialogues.success.any() and not dialogues.success.all()
    for b, (game, seed) in enumerate(zip(games, seeds)):
        env = MultiTurnTextEnv(
            game=fresh(game),
            tokenizer=tokenizer,
            chat_template=template,
            max_turns=settings.max_turns,
            max_turn_tokens=settings.max_turn_tokens,
            max_context_tokens=context,
            render_mode="ansi",
        )
        env.reset(options={"game_seed": seed})
        n = int(dialogues.attention_mask[b].sum())
        rewards = {}
        for position in (dialogues.roles[b, :n] == TokenRole.POLICY).nonzero().squeeze(1).tolist():
            observation, reward, terminated, truncated, info = env.step(int(dialogues.input_ids[b, position]))
            if "turn_text" in info:
                rewards[position] = reward
        assert observation["input_ids"][observation["attention_mask"] == 1].tolist() == row_tokens(dialogues, b)
        assert info["roles"][:n].tolist() == dialogues.roles[b, :n].tolist()
        assert (terminated, truncated) == (bool(dialogues.terminated[b]), bool(dialogues.truncated[b]))
        turns = int(dialogues.turns[b])
        assert info["turns"] == turns
        assert torch.equal(torch.tensor(info["turn_rewards"], dtype=torch.float32), dialogues.turn_rewards[b, :turns])
        assert list(rewards) == dialogues.turn_ends[b, :turns].tolist(), "each turn's reward on its last token"
        assert env.render() == dialogues.texts[b]
        last = info["turn_rewards"][-1] if turns else 0.0
        game_over = env.game.turn >= 1 + seed % 4 if isinstance(game, Countdown) else last == 1.0
        assert bool(dialogues.success[b]) == (game_over and last > 0)


class ForwardWidths:
    """Records the shape ``(rows, tokens)`` of the ``input_ids`` of every forward of a module."""

    def __init__(self, module):
        self.shapes: list[tuple[int, int]] = []
        self.handle = module.register_forward_pre_hook(
            lambda _m, _a, kw: self.shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
        )


def test_a_turn_8_token_costs_one_single_token_forward_like_a_turn_1_token(tiny):
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    settings = DialogueSettings(max_turns=8, max_turn_tokens=6, max_context_tokens=256)
    forwards = ForwardWidths(model)
    dialogues = sample_dialogues(model, [Endless()], tokenizer, [5], uniforms_for(1, settings), settings)
    n = int(dialogues.attention_mask[0].sum())
    roles = dialogues.roles[0, :n].tolist()
    assert int(dialogues.turns[0]) == 8 and roles.count(TokenRole.POLICY) > 8
    # every token is run through the LM once, the last one never: the prompt in one forward, then each policy
    # token that does not end its turn alone, and each turn's last token together with the reply that follows it
    prompt = roles.count(TokenRole.PROMPT)
    expected = [(1, prompt)]
    position = prompt
    while position < n - 1:
        width = 1
        while position + width < n and roles[position + width] == TokenRole.ENVIRONMENT:
            width += 1
        expected.append((1, width))
        position += width
    assert forwards.shapes == expected
    assert sum(tokens for _, tokens in forwards.shapes) == n - 1
    turn_starts = [p for p in range(prompt, n) if roles[p] == TokenRole.POLICY and roles[p - 1] != TokenRole.POLICY]
    first, eighth = turn_starts[0], turn_starts[7]
    fed_at = {}  # the forward index that runs each position
    position = 0
    for index, (_, tokens) in enumerate(forwards.shapes):
        fed_at.update({p: index for p in range(position, position + tokens)})
        position += tokens
    # the forward that runs a turn's first token gives the logits its second token is drawn from
    assert forwards.shapes[fed_at[first]] == forwards.shapes[fed_at[eighth]] == (1, 1)
    # a batch: every forward after the prefill runs each unfinished row's unread tokens, nothing more
    forwards.shapes.clear()
    games, seeds = mixed_games()
    dialogues = sample_dialogues(model, games, tokenizer, seeds, uniforms_for(len(games), SETTINGS), SETTINGS)
    lengths = dialogues.attention_mask.sum(-1)
    prompts = (dialogues.roles == TokenRole.PROMPT).sum(-1)
    assert sum(rows * tokens for rows, tokens in forwards.shapes[1:]) == int((lengths - prompts - 1).sum())
    forwards.handle.remove()


def test_a_game_that_fails_is_one_line_naming_the_game_seed_and_turn(tiny):
    model, tokenizer = tiny
    settings = DialogueSettings(max_turns=4, max_turn_tokens=3, max_context_tokens=256)
    games = [Endless(), Boom()]
    with pytest.raises(GameError) as error:
        sample_dialogues(model, games, tokenizer, [4, 5], uniforms_for(2, settings), settings)
    assert (
        str(error.value)
        == "game Boom (episode seed 5, turn 2) raised RuntimeError: the board broke; fix the game's step"
    )
    with pytest.raises(GameError, match=r"^game Countdown \(episode seed 0, at reset\) opens with \d+ tokens"):
        sample_dialogues(
            model, [Countdown()], tokenizer, [0], uniforms_for(1, settings), replace(settings, max_context_tokens=4)
        )


def test_settings_and_shapes_are_checked_in_one_line(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="must be positive"):
        DialogueSettings(temperature=0.0)
    with pytest.raises(ValueError, match=r"2 games need 2 game seeds and uniforms of shape \(2, max_turns=4"):
        sample_dialogues(model, [Endless(), Endless()], tokenizer, [1, 2], uniforms_for(2, SETTINGS)[:, :2], SETTINGS)
    game = Endless()
    with pytest.raises(ValueError, match="its own game object"):
        sample_dialogues(model, [game, game], tokenizer, [1, 2], uniforms_for(2, SETTINGS), SETTINGS)
