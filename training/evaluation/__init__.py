"""Scores in the units each task's users quote, and the plots that go with them."""
