"""Deterministic synthetic C4 records: the tiny corpus of the shared fixtures and fault tests."""

from __future__ import annotations

import random

_WORDS = (
    "the of and to in is was for on that with as by at from his an were are which this be "
    "has had also first one their its after new who they two her she been other when there "
    "all during into school time may years more most only over city some world would where "
    "later up such used many can state about national out known university united then made "
    "café naïve façade résumé Zürich São–Paulo “quoted” it’s 東京 Ωmega"
).split()


def make_c4_records(count: int, seed: int = 0) -> list[dict]:
    """Deterministic synthetic C4 records with unique texts (some non-ASCII, some newlines)."""
    rng = random.Random(seed)
    records = []
    for index in range(count):
        sentences = []
        for _ in range(rng.randint(2, 6)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
            sentences.append(" ".join(words).capitalize() + ".")
        text = f"Document {index}. " + " ".join(sentences)
        if index % 5 == 0:
            text += "\n\nA second paragraph of document " + str(index) + "."
        records.append(
            {
                "text": text,
                "timestamp": f"2019-04-{1 + index % 28:02d}T12:{index % 60:02d}:00Z",
                "url": f"https://example.org/doc/{index}",
            }
        )
    return records
