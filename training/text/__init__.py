"""Tokenizers learned from (or saved beside) a run: WordPiece and bytes."""
