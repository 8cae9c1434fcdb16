"""Full models (encoder + attention + head) that can carry pretrained weights."""
