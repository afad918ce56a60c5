"""Where raw examples come from: the generated number-words task, local text
files, tensorflow-datasets. Untokenized Python lists; no TensorFlow needed."""
