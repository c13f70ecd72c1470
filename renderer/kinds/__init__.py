"""One pipeline per input kind, each the same shape: check, parse, check the model, build."""
