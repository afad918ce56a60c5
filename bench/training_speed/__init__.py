"""Training speed: tokens/s, MFU and where the step's time goes."""
