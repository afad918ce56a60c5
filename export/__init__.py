"""tfformer export: SavedModel and TFLite/LiteRT.

Not built yet (see the "Export" issue). This package may import `tfformer`
but never `training`.
"""
