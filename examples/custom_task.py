"""A task of your own for scalerl: `--set task.type=python --set task.path=examples/custom_task.py`.

scalerl constructs the class with `task.options` as keyword arguments, reads (question, answer)
pairs from `prompts(seed)` (it keeps the distinct questions, holds some out for validation and
trains on the rest) and calls `check(answer, reference)` on the part of each completion where the
answer goes (between <answer> and </answer> unless task.answer_marker says otherwise). See
docs/your-data.md, "Your own task in Python".
"""

import random


class CountLetters:
    """How many times does a letter occur in a word of random letters? (the answer is a number)."""

    def __init__(self, min_len: int = 4, max_len: int = 12, alphabet: str = "abcde"):
        self.min_len, self.max_len, self.alphabet = min_len, max_len, alphabet

    def prompts(self, seed: int):
        """Endless (question, answer) pairs, the same for the same seed."""
        rng = random.Random(seed)
        while True:
            word = "".join(rng.choice(self.alphabet) for _ in range(rng.randint(self.min_len, self.max_len)))
            letter = rng.choice(self.alphabet)
            yield f"How many times does the letter {letter} occur in {word}?", str(word.count(letter))

    def check(self, answer: str, reference: str) -> bool:
        """The completion's answer (its text between the answer tags) against the reference."""
        return answer.strip() == reference
