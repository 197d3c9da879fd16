"""Data stage: C4-format corpus, tokenizer, packed token shards and their reader."""
