"""The portable runtimes an export ships next to its model: plain Python,
NumPy and `ai_edge_litert` only, each file named as it ships (`tokenizer.py`,
`generate.py`, `classify.py`, `embed.py`, `classify_image.py`). An app
developer reads them as the reference to port; the tests run them as an app
would. They import nothing of tfformer (a shipped file finds its neighbours
in its own directory)."""
